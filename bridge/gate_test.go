package bridge_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// quiet waits until everything that could still happen has: every delivery
// handled, the mirror caught up with the transcripts, and nothing left to
// send. Only then can a test say that nothing else was posted.
func (tb *testBundle) quiet(t *testing.T) {
	t.Helper()
	tb.eventually(t, func() bool {
		pending, err := tb.store.SlackInboxPending(tb.ctx, 1)
		if err != nil || len(pending) > 0 {
			return false
		}
		cursor, err := tb.store.SlackMirrorCursor(tb.ctx)
		if err != nil {
			return false
		}
		if evs, err := tb.store.SlackMirrorEvents(tb.ctx, cursor, 1); err != nil || len(evs) > 0 {
			return false
		}
		_, err = tb.store.SlackOutboxNextDue(tb.ctx)
		return errors.Is(err, store.ErrNotFound)
	}, 10*time.Second, "bridge never went quiet")
}

// threadSession is the session of a Slack thread.
func (tb *testBundle) threadSession(t *testing.T, channel, root string) *store.Session {
	t.Helper()
	s, err := tb.store.SessionGetByTag(tb.ctx, "slack:"+channel+":"+root)
	require.NoError(t, err)
	return s
}

func (tb *testBundle) eventTypes(t *testing.T, sessionID string) []string {
	t.Helper()
	evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: sessionID, Limit: 1000})
	require.NoError(t, err)
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// TestSlackPostureNeedsAStewardToHoldLess: a Slack user who is no steward
// cannot switch review off; the refusal names who may, records nothing, and
// the next run is still held. Making a thread stricter is anyone's right.
func TestSlackPostureNeedsAStewardToHoldLess(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvY1", mention("CY", "U1", root, "", "status"))
	tb.waitPost(t, "CY", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Status:*") })
	ses := tb.threadSession(t, "CY", root)
	before := len(tb.eventTypes(t, ses.ID))

	tb.event(t, "EvY2", mention("CY", "U1", tb.ts(), root, "policy yolo"))
	refusal := tb.waitPost(t, "CY", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], ":no_entry:") })
	require.Contains(t, refusal.Form["text"], "only a steward may change the posture from auto to yolo")
	require.Contains(t, refusal.Form["text"], "<@USTEWARD>", "the refusal names who may")
	tb.quiet(t)
	got := tb.threadSession(t, "CY", root)
	require.Equal(t, store.PolicyAuto, got.Policy)
	require.NotContains(t, tb.eventTypes(t, ses.ID)[before:], store.EventPolicySet)

	tb.event(t, "EvY3", mention("CY", "U1", tb.ts(), root, "draft-memo Otters"))
	tb.holdCard(t, "CY", root) // still held for review

	tb.event(t, "EvY4", mention("CY", "U1", tb.ts(), root, "policy manual"))
	tb.waitPost(t, "CY", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "now `manual`") })
	tb.event(t, "EvY5", mention("CY", "USTEWARD", tb.ts(), root, "policy yolo"))
	tb.waitPost(t, "CY", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "now `yolo`") })
	require.Equal(t, store.PolicyYolo, tb.threadSession(t, "CY", root).Policy)
}

// TestSlackTerminateOfAHeldRun: a non-steward's terminate leaves the hold
// open and says so (its card keeps its buttons); a steward's rejects the
// hold as a decision (comment `terminated`), audited, with the card updated
// like any rejection.
func TestSlackTerminateOfAHeldRun(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvX1", mention("CX", "U1", root, "", "draft-memo Kelp"))
	card, holdID := tb.holdCard(t, "CX", root)

	tb.event(t, "EvX2", mention("CX", "U1", tb.ts(), root, "terminate"))
	tb.waitPost(t, "CX", root, func(c fakeslack.Call) bool {
		return strings.Contains(c.Form["text"], "1 run waiting for approval stays open")
	})
	tb.quiet(t)
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status)
	require.Empty(t, tb.updates("CX", card.TS), "the card is untouched")
	audit, err := tb.store.HoldDecisionList(tb.ctx, holdID)
	require.NoError(t, err)
	require.Empty(t, audit)

	tb.event(t, "EvX3", mention("CX", "USTEWARD", tb.ts(), root, "terminate"))
	tb.eventually(t, func() bool { return len(tb.updates("CX", card.TS)) == 1 }, 10*time.Second)
	update := tb.updates("CX", card.TS)[0]
	require.NotContains(t, update.Form["blocks"], "hold_approve", "decided: buttons gone")
	require.Contains(t, text(update), "<@USTEWARD>")
	h, err = tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, []string{store.HoldRejected, "slack:USTEWARD", "slack", "terminated"}, []string{h.Status, h.DecidedBy, h.DecidedVia, h.Comment})
	audit, err = tb.store.HoldDecisionList(tb.ctx, holdID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, store.AttemptAccepted, audit[0].Outcome)
	r, err := tb.store.RunGetByID(tb.ctx, h.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunCancelled, r.Status)

	tb.event(t, "EvX4", mention("CX", "U1", tb.ts(), root, "status"))
	st := tb.waitPost(t, "CX", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Status:*") })
	require.Contains(t, st.Form["text"], "(terminated by <@USTEWARD>)", "who, as Slack names people")
}

// TestSlackAmbiguousThreadDecision: with two open holds in a thread a bare
// `approve` decides nothing and lists them; naming one decides that one.
func TestSlackAmbiguousThreadDecision(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvA1", mention("CA", "U1", root, "", "draft-memo First"))
	tb.holdCard(t, "CA", root)
	tb.event(t, "EvA2", mention("CA", "U1", tb.ts(), root, "draft-memo Second"))
	var holds []*store.Hold
	tb.eventually(t, func() bool {
		var err error
		holds, err = tb.store.HoldList(tb.ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: tb.threadSession(t, "CA", root).ID, Limit: 10})
		return err == nil && len(holds) == 2
	}, 10*time.Second)

	tb.event(t, "EvA3", mention("CA", "USTEWARD", tb.ts(), root, "approve looks fine"))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 1 }, 10*time.Second)
	ask := tb.slack.Delivered("chat.postEphemeral")[0].Form["text"]
	require.Contains(t, ask, "2 open holds")
	require.Contains(t, ask, holds[0].ID)
	require.Contains(t, ask, holds[1].ID)
	tb.quiet(t)
	for _, h := range holds {
		got, err := tb.store.HoldGetByID(tb.ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, got.Status, "nothing decided on a guess")
	}

	tb.event(t, "EvA4", mention("CA", "USTEWARD", tb.ts(), root, "approve "+holds[0].ID+" the first one"))
	tb.eventually(t, func() bool {
		got, err := tb.store.HoldGetByID(tb.ctx, holds[0].ID)
		return err == nil && got.Status == store.HoldApproved
	}, 10*time.Second)
	got, err := tb.store.HoldGetByID(tb.ctx, holds[0].ID)
	require.NoError(t, err)
	require.Equal(t, "the first one", got.Comment)
	other, err := tb.store.HoldGetByID(tb.ctx, holds[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, other.Status)
}

func stewardsCfg(c *bridge.Config) { c.Stewards = []string{"USTEWARD", "USTEWARD2"} }

// TestSlackStatusSaysWhatWaits: a thread whose run waits on a steward says
// so in its status, not just "idle".
func TestSlackStatusSaysWhatWaits(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvSW1", mention("CW", "U1", root, "", "draft-memo Kelp\nKelp forests sway."))
	tb.holdCard(t, "CW", root)
	tb.event(t, "EvSW2", mention("CW", "U1", tb.ts(), root, "status"))
	st := tb.waitPost(t, "CW", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Status:*") })
	ses := tb.threadSession(t, "CW", root)
	runs, err := tb.store.RunList(tb.ctx, &store.RunListParams{SessionID: ses.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	// The run, named and linked, says what it waits for; the session links
	// its console page.
	require.Contains(t, st.Form["text"], "<http://holdfast.test/runs/"+runs[0].ID+"|Kelp> (`/draft-memo`) waits for a steward")
	require.Contains(t, st.Form["text"], "<http://holdfast.test/sessions/"+ses.ID+"|this session in the console>")
}
