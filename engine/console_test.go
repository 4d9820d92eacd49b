package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestMayDecideIsDecidesRule: what MayDecide answers before a click is what
// Decide does after it, case by case.
func TestMayDecideIsDecidesRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/held", "**Approval** `hold`", "**Approvals** `2`")
	owner := b.user(t, "own", store.RoleAdmin, "")
	ada := b.user(t, "ada", store.RoleSteward, "UADA")
	vic := b.user(t, "vic", store.RoleViewer, "")
	gone := b.user(t, "gone", store.RoleSteward, "UGONE")
	_, err := b.db.UserDisabledSet(ctx, gone.ID, true)
	require.NoError(t, err)

	it := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "user:" + owner.ID, Payload: map[string]any{"brief": "x"}})
	h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
	_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(ada), "console")})
	require.NoError(t, err, "the first of two approvals")

	for name, tc := range map[string]struct {
		d      Decider
		ok     bool
		reason string
	}{
		"Requester":            {via(steward(owner), "console"), false, "own asked for this run and may not approve it"},
		"Viewer":               {via(steward(vic), "console"), false, "vic is not a steward"},
		"AlreadyApproved":      {via(steward(ada), "console"), false, "you already approved this hold (1 of 2 approvals)"},
		"SameStewardFromSlack": {via(Decider{SlackUserID: "UADA"}, "slack"), false, "already approved this hold"},
		"DisabledLinkedUser":   {via(Decider{SlackUserID: "UGONE"}, "slack"), false, "is not a steward"},
		"UnknownSlackUser":     {via(Decider{SlackUserID: "UNOBODY"}, "slack"), false, "slack:UNOBODY is not a steward"},
	} {
		ok, reason, err := b.eng.MayDecide(ctx, h.ID, tc.d)
		require.NoError(t, err, name)
		require.Equal(t, tc.ok, ok, name)
		require.Contains(t, reason, tc.reason, name)
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: tc.d})
		require.Error(t, err, name)
		require.Equal(t, reason, store.ReasonOf(err), "%s: Decide refuses with the sentence MayDecide gave", name)
	}
	audit, err := b.db.HoldDecisionList(ctx, h.ID)
	require.NoError(t, err)
	require.Len(t, audit, 7, "every refused attempt is audited, the repeated approval too")

	rights, err := b.eng.RightsOf(ctx, via(steward(owner), "console"))
	require.NoError(t, err)
	ok, reason := rights.MayReject(h)
	require.True(t, ok, "the requester may still reject: %s", reason)

	s2 := b.user(t, "s2", store.RoleSteward, "")
	ok, _, err = b.eng.MayDecide(ctx, h.ID, via(steward(s2), "console"))
	require.NoError(t, err)
	require.True(t, ok)
	_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s2), "console")})
	require.NoError(t, err)
	ok, reason, err = b.eng.MayDecide(ctx, h.ID, via(steward(b.user(t, "s3", store.RoleSteward, "")), "console"))
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, reason, "already approved by s2")
	_, _, err = b.eng.MayDecide(ctx, "hld_missing", via(steward(s2), "console"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestEditedOutputMustPassGuards: an edited approval is checked by the
// workflow's Guard steps; a failing edit is refused naming the check,
// audited, and leaves the hold open.
func TestEditedOutputMustPassGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/held", "**Approval** `hold`")
	ada := b.user(t, "ada", store.RoleSteward, "")
	it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
	h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))

	// A blank edit would publish an empty memo: it is refused as bad
	// input, changing nothing (not even the audit: it is no attempt).
	for _, blank := range []string{"   ", "\n\t\n", "\r\n"} {
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: blank, Decider: via(steward(ada), "api")})
		require.ErrorIs(t, err, store.ErrInvalid, "%q", blank)
	}
	outcomes, err := b.eng.GuardOutput(ctx, h.RunID, "this is FORBIDDEN text")
	require.NoError(t, err)
	require.Len(t, outcomes, 2)
	_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: "this is FORBIDDEN text", Decider: via(steward(ada), "console")})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Contains(t, store.ReasonOf(err), "not_contains")
	cur, err := b.db.HoldGetByID(ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, cur.Status)
	audit, err := b.db.HoldDecisionList(ctx, h.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, store.AttemptRefused, audit[0].Outcome)
	require.Equal(t, "this is FORBIDDEN text", *audit[0].Output)

	_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: "# Fine\n\nclean text", Decider: via(steward(ada), "console")})
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, b.waitRun(t, it.ID, EventRunFinished).Status)
}

func TestTitles(t *testing.T) {
	t.Parallel()
	edited := "# Edited heading\n\ntext"
	long := strings.Repeat("word ", 60)
	for name, tc := range map[string]struct {
		hold    *store.Hold
		payload map[string]any
		want    string
	}{
		"OutputHeading": {&store.Hold{Output: "# From the output\n\nbody", GateLabel: "Review draft"}, map[string]any{"title": "T"}, "From the output"},
		"EditedHeading": {&store.Hold{Output: "# Old", EditedOutput: &edited}, nil, "Edited heading"},
		"PayloadTitle":  {&store.Hold{Output: "no heading", GateLabel: "Review draft"}, map[string]any{"title": " Otters "}, "Otters"},
		"BriefLine":     {&store.Hold{Output: "x", GateLabel: "Review draft"}, map[string]any{"brief": "First line\nsecond"}, "First line"},
		"GateLabel":     {&store.Hold{Output: "x", GateLabel: "Review draft", Command: "/d"}, nil, "Review draft"},
		"WorkflowName":  {&store.Hold{Output: "x", WorkflowName: "Draft memo", Command: "/d"}, nil, "Draft memo"},
		"LongBrief":     {&store.Hold{Output: "x"}, map[string]any{"brief": long}, ""}, // clipped: checked below
	} {
		got := HoldTitle(tc.hold, tc.payload)
		if name == "LongBrief" {
			require.Equal(t, titleChars, len([]rune(got)), name)
			require.True(t, strings.HasSuffix(got, "…"), name)
			continue
		}
		require.Equal(t, tc.want, got, name)
	}
	require.Equal(t, "Otters", RunTitle(&store.Run{Command: "/d", Payload: map[string]any{"title": "Otters"}}))
	require.Equal(t, "Brief", RunTitle(&store.Run{Command: "/d", Payload: map[string]any{"brief": "Brief\nmore"}}))
	require.Equal(t, "/d", RunTitle(&store.Run{Command: "/d", Payload: map[string]any{}}))
}

// TestRerun: a steward re-runs a settled run: the same payload, in the same
// session, with dedupe keys rerun:<runId>:1, :2, …
func TestRerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/auto")
	ada := b.user(t, "ada", store.RoleSteward, "")
	vic := b.user(t, "vic", store.RoleViewer, "")
	it := b.enqueue(t, EnqueueParams{Command: "/auto", OwnerUID: "slack:U1", Payload: map[string]any{"title": "T", "brief": "otters"}})
	r := b.waitRun(t, it.ID, EventRunFinished)
	require.Equal(t, store.RunSucceeded, r.Status)

	_, err := b.eng.Rerun(ctx, r.ID, via(steward(vic), "console"))
	require.ErrorIs(t, err, store.ErrForbidden)
	require.Contains(t, store.ReasonOf(err), "vic is not a steward")

	first, err := b.eng.Rerun(ctx, r.ID, via(steward(ada), "console"))
	require.NoError(t, err)
	require.Equal(t, "rerun:"+r.ID+":1", first.DedupeKey)
	require.Equal(t, it.SessionID, first.SessionID, "the re-run joins the run's session")
	require.Equal(t, "user:"+ada.ID, first.OwnerUID, "the steward asked for the re-run")
	require.Equal(t, map[string]any{"title": "T", "brief": "otters"}, first.Payload)
	// (Waited for before the next: two items of one session claimed in one
	// pass can collide on their transcript ts on this branch; h-engine fixes
	// that in the store.)
	require.Equal(t, store.RunSucceeded, b.waitRun(t, first.ID, EventRunFinished).Status)
	second, err := b.eng.Rerun(ctx, r.ID, via(steward(ada), "api"))
	require.NoError(t, err)
	require.Equal(t, "rerun:"+r.ID+":2", second.DedupeKey)
	require.NotEqual(t, first.ID, second.ID)

	_, err = b.eng.Rerun(ctx, "run_missing", via(steward(ada), "console"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestCancelRun: a steward cancels a running run (its model call stops, it
// settles cancelled) or a held one (a rejection through Decide); a settled
// run is a conflict and a non-steward is refused.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{blockLLM: true})
		doc := strings.Replace(wfDoc("/slow"), "## Policy\n", "## Policy\n- **Model** `openai:slow-model`\n", 1)
		_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/slow", Payload: map[string]any{"brief": "x"}})
		select {
		case <-b.llm.Arrived():
		case <-time.After(10 * time.Second):
			t.Fatal("model was never called")
		}
		runID := store.RunIDForItem(it.ID)
		_, err = b.eng.CancelRun(ctx, runID, via(steward(b.user(t, "vic", store.RoleViewer, "")), "api"))
		require.ErrorIs(t, err, store.ErrForbidden)
		r, err := b.eng.CancelRun(ctx, runID, via(steward(b.user(t, "ada", store.RoleSteward, "")), "api"))
		require.NoError(t, err)
		require.Equal(t, store.RunCancelled, r.Status, "a run on this process is answered settled")
		require.Contains(t, r.Error, "ada")
		_, err = b.eng.CancelRun(ctx, runID, via(steward(b.user(t, "bob", store.RoleSteward, "")), "api"))
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("Held", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		r, err := b.eng.CancelRun(ctx, h.RunID, via(steward(b.user(t, "ada", store.RoleSteward, "")), "console"))
		require.NoError(t, err)
		require.Equal(t, store.RunCancelled, r.Status)
		require.Equal(t, "rejected by ada: cancelled", r.Error)
		got, err := b.db.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, []string{store.HoldRejected, "ada", "console"}, []string{got.Status, got.DecidedBy, got.DecidedVia})
		audit, err := b.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Len(t, audit, 1, "the cancel is an audited decision")
	})
}
