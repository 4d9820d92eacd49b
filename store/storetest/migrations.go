package storetest

import (
	"context"
	"testing"

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
