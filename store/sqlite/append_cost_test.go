package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestRunLinesCostTheSameInALongSession: the engine's transcript lines (a
// run's start here, claimed on enqueue) cost as much in a session with
// 100,000 events as in a new one. The newest ts they are ordered after was
// read with one GROUP BY over the sessions of the batch, which walks every
// event of each: ~18 ms per append at 100,000 events, on the one writer
// every other write waits for.
func TestRunLinesCostTheSameInALongSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openBench(t)
	long, short := seedEvents(t, db, 100_000), seedEvents(t, db, 1)
	// The long session's newest line is ahead of the clock, as a line
	// ordered after a burst may be: the run lines must still follow it.
	ahead := time.Now().Add(time.Hour).UTC()
	_, err := db.w.Exec(`INSERT INTO session_events (session_id, ts, type) VALUES (?, ?, 'user_message')`, long.ID, formatTime(ahead))
	require.NoError(t, err)
	wf, err := db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Workflow", Body: "# Workflow /w"})
	require.NoError(t, err)
	n := 0
	claimIn := func(ses *store.Session) time.Duration {
		n++
		id := store.NewID("itm")
		start := time.Now()
		_, run, created, err := db.QueueItemInsertClaimed(ctx,
			&store.QueueItemInsertParams{ID: id, WorkflowMemoID: wf.ID, Command: "/w", DedupeKey: fmt.Sprint(n), SessionID: ses.ID},
			&store.ItemInsertClaim{RunID: store.RunIDForItem(id), RunnerID: "r", Now: time.Now(),
				Events: []store.EventAppendParams{{Type: "run_started", Actor: "engine", Payload: map[string]any{"itemId": id}}}})
		took := time.Since(start)
		require.NoError(t, err)
		require.True(t, created)
		require.NotNil(t, run)
		return took
	}
	var inLong, inShort []time.Duration
	for range 9 {
		inLong = append(inLong, claimIn(long))
		inShort = append(inShort, claimIn(short))
	}
	slices.Sort(inLong)
	slices.Sort(inShort)
	l, s := inLong[len(inLong)/2], inShort[len(inShort)/2]
	t.Logf("enqueue with its run's first line, median: %v in a session of 100,000 events, %v in a new one", l, s)
	require.Less(t, l, 4*s+time.Millisecond, "a long transcript makes a run's lines no dearer")

	evs, err := db.EventList(ctx, &store.EventListParams{SessionID: long.ID, Newest: true, Limit: len(inLong) + 1})
	require.NoError(t, err)
	require.Len(t, evs, len(inLong)+1)
	require.Equal(t, ahead.Truncate(time.Microsecond), evs[0].TS, "the line ahead of the clock")
	for i, ev := range evs[1:] {
		require.Equal(t, "run_started", ev.Type, "the run lines are the newest")
		require.True(t, ev.TS.After(evs[i].TS), "each ordered after the line before it")
	}
}
