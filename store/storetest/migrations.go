package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// SlackEventLinesBackfilled checks a store's migration to slack_event_lines
// (SQLite 031, PostgreSQL 010): it records the mention lines appended
// before it, so a delivery replayed across the upgrade still records its
// line once. open opens the same database each time; forget drops the
// table and the migration's record from s, as a database made before the
// migration lacks them.
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

// SlackInboxHeadsBackfilled checks a store's migration to marked thread
// heads (SQLite 032, PostgreSQL 011): deliveries pending before it are
// claimed as before, each thread's oldest first. forget undoes the
// migration in s, as a database made before it lacks it.
func SlackInboxHeadsBackfilled(t *testing.T, open func(t *testing.T) store.Store, forget func(t *testing.T, s store.Store)) {
	ctx := context.Background()
	s := open(t)
	add := func(key, thread string) {
		_, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: key, Kind: store.SlackKindEvent, Body: []byte(`{}`), Thread: thread}})
		require.NoError(t, err)
	}
	add("t1a", "C1:1")
	add("t1b", "C1:1")
	add("t2a", "C1:2")
	now := time.Now()
	claim := func() []string {
		got, err := s.SlackInboxClaim(ctx, &store.SlackClaimParams{Holder: "r1", Now: now, Until: now.Add(time.Minute), Limit: 10})
		require.NoError(t, err)
		var keys []string
		for _, it := range got {
			keys = append(keys, it.Key)
		}
		return keys
	}
	pending, err := s.SlackInboxPending(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, s.SlackInboxDone(ctx, pending[0].ID, ""))
	forget(t, s)
	require.NoError(t, s.Close())

	s = open(t)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.Equal(t, []string{"t1b", "t2a"}, claim(), "each thread's oldest pending delivery")
	add("t1c", "C1:1")
	require.Empty(t, claim(), "t1c waits behind t1b")
	pending, err = s.SlackInboxPending(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, s.SlackInboxDone(ctx, pending[0].ID, ""))
	require.Equal(t, []string{"t1c"}, claim())
}
