package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// runInsight covers what observability reads and keeps: trace context on
// items, runs and Slack writes, runs held more than once, usage and edges.
func runInsight(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	workflow := func(t *testing.T, s store.Store, command string) string {
		t.Helper()
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "W " + command, Body: "w", MemoType: store.MemoTypeWorkflow,
			Workflow: &store.WorkflowIndex{Command: command, Status: "live"}})
		require.NoError(t, err)
		return m.ID
	}
	// runAt enqueues an item and claims it at now, so the run is created then.
	runAt := func(t *testing.T, s store.Store, wf, command, key, sessionID string, now time.Time) *store.Run {
		t.Helper()
		p := &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf, Command: command, DedupeKey: key,
			SessionID: sessionID, TraceContext: "00-" + key + "-01", OwnerUID: "slack:U" + key}
		if sessionID == "" {
			p.NewSession = &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}
		}
		_, _, err := s.QueueItemInsert(ctx, p)
		require.NoError(t, err)
		pending, err := s.QueueItemListPending(ctx, 1)
		require.NoError(t, err)
		runs, err := s.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: "a", Claims: claims(pending), Now: now})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		return runs[0]
	}

	t.Run("TraceContextTravelsWithItemRunAndSlackWrite", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s, "/w")
		it, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf, Command: "/w",
			DedupeKey: "k", TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}})
		require.NoError(t, err)
		got, err := s.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, it.TraceContext, got.TraceContext)
		runs := claim(t, s, "a", 1)
		require.Len(t, runs, 1)
		require.Equal(t, it.TraceContext, runs[0].TraceContext, "a claimed run carries its item's trace context")
		r, err := s.RunGetByID(ctx, runs[0].ID)
		require.NoError(t, err)
		require.Equal(t, it.TraceContext, r.TraceContext, "and so does every later read of it")

		_, err = s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{{DedupeKey: "m1", Queue: "C1:1.0", Method: store.SlackPost,
			Channel: "C1", ThreadTS: "1.0", Text: "hi", TraceContext: it.TraceContext}})
		require.NoError(t, err)
		due := outboxClaim(t, s, "r1", time.Now().Add(time.Second))
		require.Len(t, due, 1)
		require.Equal(t, it.TraceContext, due[0].TraceContext)
	})

	t.Run("RunHeldAgainStartsItsNewHoldUndecided", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s, "/w")
		r := runAt(t, s, wf, "/w", "k", "", time.Now())
		first, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID) + "-budget", SessionID: r.SessionID, Command: "/w", GateLabel: "Budget", RequiredApprovals: 1}})
		require.NoError(t, err)
		_, err = s.HoldDecide(ctx, decision(first, "approve", "ada", time.Time{}))
		require.NoError(t, err)
		resumed, err := s.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: "b", Limit: 5})
		require.NoError(t, err)
		require.Len(t, resumed, 1)
		r = resumed[0]
		require.Equal(t, first.ID, r.HoldID)

		second, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), SessionID: r.SessionID, Command: "/w", GateLabel: "Review", RequiredApprovals: 1}})
		require.NoError(t, err, "a run may be held a second time")
		got, err := s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, second.ID, got.HoldID)
		require.Empty(t, got.Decision, "the earlier approval does not carry over to the new hold")
		resumable, err := s.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: "c", Limit: 5})
		require.NoError(t, err)
		require.Empty(t, resumable)
		holds, err := s.HoldList(ctx, &store.HoldListParams{SessionID: r.SessionID, Limit: 10})
		require.NoError(t, err)
		require.Len(t, holds, 2)
		ofRun, err := s.HoldListByRun(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, []string{first.ID, second.ID}, []string{ofRun[0].ID, ofRun[1].ID}, "a run's holds, oldest first")
		_, err = s.HoldDecide(ctx, decision(second, "reject", "ada", time.Time{}))
		require.NoError(t, err)
		got, err = s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunCancelled, got.Status)
	})

	t.Run("UsageSumsRunsPerKeyOverAnExactWindow", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a, b := workflow(t, s, "/a"), workflow(t, s, "/b")
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
		require.NoError(t, err)
		hour := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
		t0, t1 := hour.Add(20*time.Minute), hour.Add(time.Hour+40*time.Minute)
		for _, c := range []struct {
			wf, command, key string
			at               time.Time
			model            string
			in, out          int64
		}{
			{a, "/a", "a1", t0, "template", 10, 5},
			{a, "/a", "a2", t1, "openai:m", 100, 50},
			{b, "/b", "b1", t1, "template", 1, 1},
			{b, "/b", "b0", t1, "template", 0, 0}, // used no tokens: not counted
		} {
			r := runAt(t, s, c.wf, c.command, c.key, ses.ID, c.at)
			// Tokens arrive over several writes; the run counts once.
			require.NoError(t, s.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease,
				Usage: &store.RunUsage{Model: c.model, TokensIn: c.in / 2, TokensOut: c.out / 2}}))
			_, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
				Usage: &store.RunUsage{Model: c.model, TokensIn: c.in, TokensOut: c.out}})
			require.NoError(t, err)
			got, err := s.RunGetByID(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, []any{c.model, c.in, c.out}, []any{got.Model, got.TokensIn, got.TokensOut})
		}
		for _, tc := range []struct {
			name    string
			groupBy string
			since   time.Time
			want    []store.Usage
		}{
			{"AllTimeByWorkflow", store.UsageByWorkflow, time.Time{},
				[]store.Usage{{Key: "/a", Runs: 2, TokensIn: 110, TokensOut: 55}, {Key: "/b", Runs: 1, TokensIn: 1, TokensOut: 1}}},
			{"MidHourKeepsTheRunsAfterIt", store.UsageByWorkflow, hour.Add(10 * time.Minute),
				[]store.Usage{{Key: "/a", Runs: 2, TokensIn: 110, TokensOut: 55}, {Key: "/b", Runs: 1, TokensIn: 1, TokensOut: 1}}},
			{"MidHourDropsTheRunsBeforeIt", store.UsageByWorkflow, hour.Add(30 * time.Minute),
				[]store.Usage{{Key: "/a", Runs: 1, TokensIn: 100, TokensOut: 50}, {Key: "/b", Runs: 1, TokensIn: 1, TokensOut: 1}}},
			{"OnTheHour", store.UsageByWorkflow, hour.Add(time.Hour),
				[]store.Usage{{Key: "/a", Runs: 1, TokensIn: 100, TokensOut: 50}, {Key: "/b", Runs: 1, TokensIn: 1, TokensOut: 1}}},
			{"BySession", store.UsageBySession, time.Time{},
				[]store.Usage{{Key: ses.ID, Runs: 3, TokensIn: 111, TokensOut: 56}}},
			{"ByModel", store.UsageByModel, hour,
				[]store.Usage{{Key: "openai:m", Runs: 1, TokensIn: 100, TokensOut: 50}, {Key: "template", Runs: 2, TokensIn: 11, TokensOut: 6}}},
			{"Future", store.UsageByModel, time.Now().Add(time.Hour), []store.Usage{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.UsageList(ctx, &store.UsageListParams{GroupBy: tc.groupBy, Since: tc.since})
				require.NoError(t, err)
				plain := []store.Usage{}
				for _, u := range got {
					plain = append(plain, *u)
				}
				require.Equal(t, tc.want, plain)
			})
		}
		_, err = s.UsageList(ctx, &store.UsageListParams{GroupBy: "colour"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("EdgeListReportsEachKindInItsWindow", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s, "/w")
		now := time.Now()
		since := now.Add(-7 * 24 * time.Hour)
		settle := func(key, status, kind string, at time.Time) *store.Run {
			r := runAt(t, s, wf, "/w", key, "", at)
			_, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Now: at, Status: status,
				ErrorKind: kind, Error: kind + " went wrong"})
			require.NoError(t, err)
			return r
		}
		guard := settle("g1", store.RunFailed, "guard", now)
		settle("g0", store.RunFailed, "guard", now.Add(-8*24*time.Hour)) // before the window
		model := settle("m1", store.RunFailed, "model", now)
		settle("ok", store.RunSucceeded, "", now)
		settle("c", store.RunCancelled, "cancelled", now)
		stuck := runAt(t, s, wf, "/w", "stuck", "", now.Add(-time.Hour))
		_, ex, err := s.RunRescueMany(ctx, &store.RunRescueParams{RunnerID: "b", StaleBefore: now, Now: now,
			Exhaust: []store.RunExhaust{{RunLease: store.RunLease{ID: stuck.ID, Lease: stuck.Lease},
				Outcome: store.RunOutcome{Status: store.RunRecoveryExhausted, ItemStatus: store.ItemFailed, ErrorKind: store.RunRecoveryExhausted,
					Error: "giving up after 0 recoveries"}}}})
		require.NoError(t, err)
		require.Len(t, ex, 1)

		held := runAt(t, s, wf, "/w", "held", "", now)
		h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: held.ID, Lease: held.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(held.ID), SessionID: held.SessionID, Command: "/w", GateLabel: "Review", RequiredApprovals: 1}})
		require.NoError(t, err)
		require.NoError(t, s.HoldDecisionAppend(ctx, &store.HoldDecision{HoldID: h.ID, RunID: held.ID, Decision: "approve",
			DecidedBy: "eve", Via: "slack", Outcome: store.AttemptRefused, Reason: "eve is not a steward"}))
		require.NoError(t, s.HoldDecisionAppend(ctx, &store.HoldDecision{HoldID: h.ID, RunID: held.ID, Decision: "approve",
			DecidedBy: "old", Via: "slack", Outcome: store.AttemptRefused, Reason: "long ago", CreatedAt: now.Add(-30 * 24 * time.Hour)}))
		timeout := decision(h, "reject", "engine", now)
		timeout.DecidedVia, timeout.Audit.Via, timeout.Comment = "timeout", "timeout", "hold timed out"
		_, err = s.HoldDecide(ctx, timeout)
		require.NoError(t, err)

		broken, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Broken", Body: "z", MemoType: store.MemoTypeWorkflow,
			Workflow: &store.WorkflowIndex{Status: "draft", Errors: []store.CompileError{{Line: 3, Message: "missing Command"}}}})
		require.NoError(t, err)

		added, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: "Ev1", Kind: store.SlackKindEvent, Body: []byte("{")},
			{Key: "Ev2", Kind: store.SlackKindEvent, Body: []byte("{}")}})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, added)
		pending, err := s.SlackInboxPending(ctx, 10)
		require.NoError(t, err)
		require.NoError(t, s.SlackInboxDone(ctx, pending[0].ID, "malformed delivery: unexpected end of JSON input"))
		require.NoError(t, s.SlackInboxDone(ctx, pending[1].ID, ""))

		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
		require.NoError(t, err)
		for _, p := range []map[string]any{{"text": "Sorry, I could not answer: boom", "error": true}, {"text": "fine"}} {
			_, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeAssistantMessage, Actor: "holdfast", Payload: p})
			require.NoError(t, err)
		}

		edges, err := s.EdgeList(ctx, &store.EdgeListParams{Since: since})
		require.NoError(t, err)
		byKind := map[string]*store.Edge{}
		for _, e := range edges {
			byKind[e.Kind] = e
		}
		want := map[string]struct {
			source string
			count  int64
			check  func(e *store.EdgeExample) bool
		}{
			"guard": {store.EdgeSourceRun, 1, func(e *store.EdgeExample) bool {
				return e.RunID == guard.ID && e.Command == "/w" && e.By == "slack:Ug1" // who asked for it
			}},
			"model":                    {store.EdgeSourceRun, 1, func(e *store.EdgeExample) bool { return e.RunID == model.ID && e.SessionID == model.SessionID }},
			store.RunRecoveryExhausted: {store.EdgeSourceRun, 1, func(e *store.EdgeExample) bool { return e.RunID == stuck.ID }},
			store.EdgeHoldTimeout:      {store.EdgeSourceHold, 1, func(e *store.EdgeExample) bool { return e.HoldID == h.ID && e.RunID == held.ID }},
			store.EdgeDecisionRefused:  {store.EdgeSourceDecision, 1, func(e *store.EdgeExample) bool { return e.HoldID == h.ID && e.By == "eve" }},
			store.EdgeWorkflowBroken:   {store.EdgeSourceWorkflow, 1, func(e *store.EdgeExample) bool { return e.WorkflowMemoID == broken.ID }},
			store.EdgeSlackUnhandled:   {store.EdgeSourceSlack, 1, func(e *store.EdgeExample) bool { return e.Key == "Ev1" }},
			store.EdgeTurnFailed:       {store.EdgeSourceTurn, 1, func(e *store.EdgeExample) bool { return e.SessionID == ses.ID }},
		}
		require.Len(t, edges, len(want), "%+v", edges)
		for kind, w := range want {
			e := byKind[kind]
			require.NotNil(t, e, kind)
			require.Equal(t, w.source, e.Source, kind)
			require.Equal(t, w.count, e.Count, kind)
			require.Len(t, e.Latest, 1, kind)
			require.True(t, w.check(e.Latest[0]), "%s: %+v", kind, e.Latest[0])
			require.NotEmpty(t, e.Latest[0].Message, kind)
			require.False(t, e.Latest[0].At.IsZero(), kind)
		}

		later, err := s.EdgeList(ctx, &store.EdgeListParams{Since: now.Add(time.Hour)})
		require.NoError(t, err)
		require.Len(t, later, 1, "only the broken workflow is reported whatever the window: it is broken now")
		require.Equal(t, store.EdgeWorkflowBroken, later[0].Kind)
	})
}

// decision is what the engine hands the store for a one-approval hold:
// an approval or rejection by who that settles it.
func decision(h *store.Hold, kind, who string, now time.Time) *store.HoldDecideParams {
	p := &store.HoldDecideParams{HoldID: h.ID, ExpectApprovals: len(h.Approvals), DecidedBy: who, DecidedVia: "api", Now: now,
		Audit: store.HoldDecision{HoldID: h.ID, RunID: h.RunID, Decision: kind, DecidedBy: who, Via: "api", Outcome: store.AttemptAccepted}}
	if kind == "approve" {
		p.Status, p.RunDecision = store.HoldApproved, "approved"
		p.Approvals = append(h.Approvals, store.HoldApproval{By: who, Key: "name:" + who, Via: "api"})
		return p
	}
	p.Status, p.RunDecision = store.HoldRejected, "rejected"
	p.Outcome = &store.RunOutcome{Status: store.RunCancelled, ItemStatus: store.ItemFailed, ErrorKind: "cancelled", Error: "rejected by " + who}
	return p
}
