package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// runSteward is the suite's part for hold titles, reminders and the App
// Home's reads.
func runSteward(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	// held opens a hold on a fresh run of item key, owned by owner.
	held := func(t *testing.T, s store.Store, owner, key string, remind time.Duration, at *time.Time) *store.Hold {
		t.Helper()
		wf, err := s.WorkflowGetByCommand(ctx, "/w")
		if err != nil {
			m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "W", Body: "w", MemoType: store.MemoTypeWorkflow,
				Workflow: &store.WorkflowIndex{Command: "/w", Status: "live"}})
			require.NoError(t, err)
			wf = &store.Workflow{MemoID: m.ID}
		}
		it, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), OwnerUID: owner, WorkflowMemoID: wf.MemoID,
			Command: "/w", DedupeKey: key, NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}})
		require.NoError(t, err)
		runs, err := s.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: "a", Claims: []store.ItemClaim{{ItemID: it.ID}}})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		r := runs[0]
		h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), SessionID: r.SessionID, OwnerUID: owner, Command: "/w", GateLabel: "Check",
				Title: "Otters at dusk", Output: "out", RequiredApprovals: 1, RemindEvery: remind, RemindAt: at}})
		require.NoError(t, err)
		return h
	}

	t.Run("HoldKeepsTitleAndReminderState", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		h := held(t, s, "slack:U1", "k", 4*time.Hour, &at)
		got, err := s.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, "Otters at dusk", got.Title)
		require.Equal(t, 4*time.Hour, got.RemindEvery)
		require.Zero(t, got.RemindersSent)
		require.NotNil(t, got.RemindAt)
		require.True(t, at.Equal(*got.RemindAt), "%s != %s", at, *got.RemindAt)

		none := held(t, s, "slack:U1", "k2", 0, nil)
		require.Nil(t, none.RemindAt)
		require.Zero(t, none.RemindEvery)
	})

	t.Run("HoldRemindersAreDueOnceEach", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		now := time.Now().UTC()
		past, later := now.Add(-time.Minute), now.Add(time.Hour)
		due := held(t, s, "slack:U1", "due", time.Hour, &past)
		held(t, s, "slack:U1", "later", time.Hour, &later)
		held(t, s, "slack:U1", "never", 0, nil)

		list, err := s.HoldListRemindDue(ctx, now, 10)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, due.ID, list[0].ID)

		next := now.Add(time.Hour)
		remind := &store.HoldRemindParams{HoldID: due.ID, ExpectSent: 0, Next: &next, Now: now,
			Events: []store.EventAppendParams{{Type: transcript.TypeHoldReminder, Actor: "engine", Payload: map[string]any{"holdId": due.ID, "n": 1}}}}
		h, err := s.HoldRemind(ctx, remind)
		require.NoError(t, err)
		require.Equal(t, 1, h.RemindersSent)
		require.True(t, next.Truncate(time.Millisecond).Equal(h.RemindAt.Truncate(time.Millisecond)))
		_, err = s.HoldRemind(ctx, remind)
		require.ErrorIs(t, err, store.ErrConflict, "a reminder is recorded once")
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: h.SessionID, Types: []string{transcript.TypeHoldReminder}})
		require.NoError(t, err)
		require.Len(t, evs, 1, "its transcript line is written with it, once")

		list, err = s.HoldListRemindDue(ctx, now, 10)
		require.NoError(t, err)
		require.Empty(t, list, "the next one is not due yet")

		// The last reminder leaves none due; a decided hold is reminded no more.
		h, err = s.HoldRemind(ctx, &store.HoldRemindParams{HoldID: due.ID, ExpectSent: 1, Now: now})
		require.NoError(t, err)
		require.Nil(t, h.RemindAt)
		list, err = s.HoldListRemindDue(ctx, now.Add(24*time.Hour), 10)
		require.NoError(t, err)
		require.Len(t, list, 1, "only the hold whose next reminder is later")
		decided := list[0]
		_, err = s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: decided.ID, Status: store.HoldRejected, DecidedBy: "ada",
			DecidedVia: "console", RunDecision: "rejected",
			Audit: store.HoldDecision{HoldID: decided.ID, RunID: decided.RunID, Decision: "reject", DecidedBy: "ada", Outcome: store.AttemptAccepted}})
		require.NoError(t, err)
		list, err = s.HoldListRemindDue(ctx, now.Add(24*time.Hour), 10)
		require.NoError(t, err)
		require.Empty(t, list, "a decision stops its reminders")
		_, err = s.HoldRemind(ctx, &store.HoldRemindParams{HoldID: decided.ID, ExpectSent: 0, Now: now})
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("RunListByOwner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := held(t, s, "slack:U1", "a", 0, nil)
		b := held(t, s, "slack:U1", "b", 0, nil)
		held(t, s, "slack:U2", "c", 0, nil)
		runs, err := s.RunListByOwner(ctx, "slack:U1", 10)
		require.NoError(t, err)
		require.Len(t, runs, 2)
		require.Equal(t, []string{b.RunID, a.RunID}, []string{runs[0].ID, runs[1].ID}, "newest first")
		runs, err = s.RunListByOwner(ctx, "slack:U1", 1)
		require.NoError(t, err)
		require.Len(t, runs, 1)
		runs, err = s.RunListByOwner(ctx, "slack:U9", 10)
		require.NoError(t, err)
		require.Empty(t, runs)
	})
}
