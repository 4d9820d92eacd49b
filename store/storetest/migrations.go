package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// UpgradeCheck checks one migration that fills in data: open opens the
// same database each time; forget undoes the migration in s, as a database
// made before it lacks it.
type UpgradeCheck func(t *testing.T, open func(t *testing.T) store.Store, forget func(t *testing.T, s store.Store))

// SlackEventLinesBackfilled checks a store's migration to slack_event_lines
// (SQLite 031, PostgreSQL 010): it records the mention lines appended
// before it, so a delivery replayed across the upgrade still records its
// line once (an UpgradeCheck).
func SlackEventLinesBackfilled(t *testing.T, open func(t *testing.T) store.Store, forget func(t *testing.T, s store.Store)) {
	ctx := context.Background()
	s := open(t)
	ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Policy: store.PolicyAuto})
	require.NoError(t, err)
	line := &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Actor: "slack:U1", Payload: map[string]any{"text": "status"}}
	added, err := s.SlackEventAppendOnce(ctx, "Ev1", line)
	require.NoError(t, err)
	require.True(t, added)
	forget(t, s)
	require.NoError(t, s.Close())

	s = open(t)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	added, err = s.SlackEventAppendOnce(ctx, "Ev1", line)
	require.NoError(t, err)
	require.False(t, added, "the line from before the upgrade counts")
	added, err = s.SlackEventAppendOnce(ctx, "Ev2", line)
	require.NoError(t, err)
	require.True(t, added)
}

// SlackHeadsBackfilled checks a store's migration to marked heads (SQLite
// 032, PostgreSQL 011): inbox deliveries and outbox messages pending before
// it are claimed as before, each thread's oldest first (an UpgradeCheck).
func SlackHeadsBackfilled(t *testing.T, open func(t *testing.T) store.Store, forget func(t *testing.T, s store.Store)) {
	ctx := context.Background()
	s := open(t)
	add := func(key, thread string) {
		_, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: key, Kind: store.SlackKindEvent, Body: []byte(`{}`), Thread: thread}})
		require.NoError(t, err)
		_, err = s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: thread, Method: store.SlackPost, Channel: "C1", Text: "x"}})
		require.NoError(t, err)
	}
	add("t1a", "C1:1")
	add("t1b", "C1:1")
	add("t2a", "C1:2")
	// claim claims both queues' heads, answering their keys; finish takes
	// the first claimed of each out of pending.
	claim := func() (in []*store.SlackInboxItem, out []*store.SlackOutboxMsg, keys []string) {
		now := time.Now()
		p := &store.SlackClaimParams{Holder: "r1", Now: now, Until: now.Add(time.Minute), Limit: 10}
		in, err := s.SlackInboxClaim(ctx, p)
		require.NoError(t, err)
		out, err = s.SlackOutboxClaim(ctx, p)
		require.NoError(t, err)
		for _, it := range in {
			keys = append(keys, "in:"+it.Key)
		}
		for _, m := range out {
			keys = append(keys, "out:"+m.DedupeKey)
		}
		return in, out, keys
	}
	finish := func(in []*store.SlackInboxItem, out []*store.SlackOutboxMsg) {
		require.NoError(t, s.SlackInboxDone(ctx, in[0].ID, ""))
		require.NoError(t, s.SlackOutboxSent(ctx, out[0].ID, out[0].Claim, "1.0"))
	}
	in, out, _ := claim()
	finish(in, out) // t2a stays claimed
	forget(t, s)
	require.NoError(t, s.Close())

	s = open(t)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	in, out, keys := claim()
	require.Equal(t, []string{"in:t1b", "out:t1b"}, keys, "each thread's oldest pending row; t2a's is held")
	add("t1c", "C1:1")
	_, _, keys = claim()
	require.Empty(t, keys, "t1c waits behind t1b")
	finish(in, out)
	_, _, keys = claim()
	require.Equal(t, []string{"in:t1c", "out:t1c"}, keys)
}
