package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
)

// TestSlackQueueWritesTakeTwoRoundTrips: each write of the Slack queues is
// two round trips to the database however many rows it carries (a mirror
// step queueing a long memo's parts, a batch of deliveries), which is what
// a replica on another machine from its database waits for.
func TestSlackQueueWritesTakeTwoRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := &pgtest.RoundTrips{}
	db, err := postgres.Open(ctx, postgres.Config{URL: pgtest.SchemaURL(t), Tracer: rt})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	msgs := func(prefix string, n int) []*store.SlackOutboxAddParams {
		out := make([]*store.SlackOutboxAddParams, n)
		for i := range out {
			out[i] = &store.SlackOutboxAddParams{DedupeKey: fmt.Sprint(prefix, i), Queue: fmt.Sprint("C1:", i%3), Method: store.SlackPost,
				Channel: "C1", Text: "part"}
		}
		return out
	}
	deliveries := make([]*store.SlackInboxAddParams, 10)
	for i := range deliveries {
		deliveries[i] = &store.SlackInboxAddParams{Key: fmt.Sprint("Ev", i), Kind: store.SlackKindEvent, Body: []byte(`{}`), Thread: fmt.Sprint("C1:", i%3)}
	}
	now := time.Now()
	claim := &store.SlackClaimParams{Holder: "r1", Now: now.Add(time.Second), Until: now.Add(time.Minute), Limit: 1}
	var (
		in  []*store.SlackInboxItem
		out []*store.SlackOutboxMsg
	)
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"mirror step, one message", func() error { _, err := db.SlackMirrorAdvance(ctx, 1, msgs("a", 1)); return err }},
		{"mirror step, ten messages", func() error { _, err := db.SlackMirrorAdvance(ctx, 2, msgs("b", 10)); return err }},
		{"ten deliveries", func() error { _, err := db.SlackInboxAdd(ctx, deliveries); return err }},
		{"inbox claim", func() (err error) { in, err = db.SlackInboxClaim(ctx, claim); return err }},
		{"delivery done", func() error { return db.SlackInboxDone(ctx, in[0].ID, "") }},
		{"outbox claim", func() (err error) { out, err = db.SlackOutboxClaim(ctx, claim); return err }},
		{"message sent", func() error { return db.SlackOutboxSent(ctx, out[0].ID, out[0].Claim, "1.0") }},
	} {
		n0 := rt.N()
		require.NoError(t, step.do(), step.name)
		require.Equal(t, int64(2), rt.N()-n0, "%s: round trips", step.name)
	}
}
