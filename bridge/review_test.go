package bridge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// guardedWorkflow imports /guarded: the draft-memo example whose Guard also
// refuses the word FORBIDDEN.
func (tb *testBundle) guardedWorkflow(t *testing.T) {
	t.Helper()
	wf := strings.Replace(strings.Replace(draftMemo(t), "`/draft-memo`", "`/guarded`", 1),
		"   max_chars: 20000\n", "   max_chars: 20000\n   not_contains: FORBIDDEN\n", 1)
	_, _, err := tb.lib.ImportWorkflow(tb.ctx, "Guarded draft", wf)
	require.NoError(t, err)
}

// TestReviewModalEditedApproval: "Comment or edit…" opens the review modal
// at once (views.open on the click's trigger, before the ack); its
// submission approves with the steward's edit and comment through the
// engine; the steward is told in the thread, the requester is mentioned,
// the memo is the edited text and the card shows the decision and the
// published text, its buttons gone.
func TestReviewModalEditedApproval(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.slack.AddUser(fakeslack.User{ID: "U1", Name: "ada", DisplayName: "Ada"})
	root := tb.ts()
	tb.event(t, "EvR1", mention("CR", "U1", root, "", "draft-memo Otters\nOtters hold hands while they sleep."))
	card, holdID := tb.holdCard(t, "CR", root)
	require.Contains(t, text(card), "*Otters*", "the card leads with the hold's title")
	require.Contains(t, text(card), "asked by <@U1>")
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, "Otters", h.Title)

	status, body := tb.reviewClick(t, "USTEWARD", holdID, "CR", card.TS, root)
	require.Equal(t, http.StatusOK, status, body)
	views := tb.slack.Views()
	require.Len(t, views, 1, "views.open was called before the click was acknowledged")
	view := viewOf(t, views[0])
	require.Equal(t, []any{"modal", "hold_review", holdID}, []any{view["type"], view["callback_id"], view["private_metadata"]})
	decision := blockByID(view, "decision")
	require.NotNil(t, decision)
	el := decision["element"].(map[string]any)
	require.Equal(t, []any{"radio_buttons", "decision", "approve"}, []any{el["type"], el["action_id"], el["initial_option"].(map[string]any)["value"]})
	var values []any
	for _, o := range el["options"].([]any) {
		values = append(values, o.(map[string]any)["value"])
	}
	require.Equal(t, []any{"approve", "reject"}, values)
	comment := blockByID(view, "comment")
	require.Equal(t, true, comment["optional"])
	require.Equal(t, []any{"plain_text_input", "comment", true}, []any{comment["element"].(map[string]any)["type"],
		comment["element"].(map[string]any)["action_id"], comment["element"].(map[string]any)["multiline"]})
	output := blockByID(view, "output")
	require.NotNil(t, output, "an output under 3,000 characters can be edited")
	oel := output["element"].(map[string]any)
	require.Equal(t, []any{"plain_text_input", "output", true, h.Output}, []any{oel["type"], oel["action_id"], oel["multiline"], oel["initial_value"]})
	require.Empty(t, tb.ephemerals("USTEWARD"), "opening the modal says nothing else")

	edited := "# Otters\n\nOtters hold hands, edited by a steward."
	status, body = tb.submitReview(t, "USTEWARD", holdID, review{decision: "approve", comment: "tightened it", output: &edited})
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, body, "an empty 200 closes the modal")

	eph := tb.waitEphemeral(t, "USTEWARD", func(s string) bool { return strings.Contains(s, "You approved") })
	require.Contains(t, eph.Form["text"], "with your edit")
	require.Equal(t, []string{"CR", root}, []string{eph.Form["channel"], eph.Form["thread_ts"]}, "in the hold's thread")
	memo := tb.waitPost(t, "CR", root, func(c fakeslack.Call) bool {
		return c.Form["blocks"] != "" && strings.Contains(text(c), "edited by a steward")
	})
	require.NotContains(t, text(memo), "while they sleep", "the memo is the edited text")
	told := tb.waitPost(t, "CR", root, func(c fakeslack.Call) bool { return strings.HasPrefix(c.Form["text"], "<@U1>") })
	require.Contains(t, told.Form["text"], "*Approved* by <@USTEWARD> via slack")
	require.Contains(t, told.Form["text"], "tightened it")
	require.Contains(t, told.Form["text"], "*Otters*")

	tb.eventually(t, func() bool { return len(tb.updates("CR", card.TS)) == 1 }, 10*time.Second)
	upd := text(tb.updates("CR", card.TS)[0])
	require.NotContains(t, upd, "hold_approve", "buttons gone")
	require.NotContains(t, upd, "hold_review")
	require.NotContains(t, upd, "waiting for a steward")
	require.Contains(t, upd, "*Approved* by <@USTEWARD> via slack at <!date^")
	require.Contains(t, upd, "tightened it")
	require.Contains(t, upd, "Published, as edited by <@USTEWARD>:")
	require.Contains(t, upd, "edited by a steward", "the published text")

	h, err = tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, []string{store.HoldApproved, "slack:USTEWARD", "slack", "tightened it", edited},
		[]string{h.Status, h.DecidedBy, h.DecidedVia, h.Comment, *h.EditedOutput})
	evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: h.SessionID, Types: []string{"user_message"}})
	require.NoError(t, err)
	require.Equal(t, "Ada", evs[0].Payload["speaker"], "the requester's Slack name, from users.info")
}

// TestReviewRefusals: whoever may not decide, or decides what may not be,
// changes nothing and is told why, ephemerally, in the hold's thread.
func TestReviewRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.guardedWorkflow(t)
	for _, tc := range []struct {
		name string
		// act clicks or submits as user; want is in what user is told.
		act       func(t *testing.T, holdID string, card fakeslack.Call, root string)
		user      string
		want      string
		requester string // default U1
	}{
		{name: "NonStewardClick", user: "UNOBODY", want: "UNOBODY> is not a steward",
			act: func(t *testing.T, holdID string, card fakeslack.Call, root string) {
				status, _ := tb.reviewClick(t, "UNOBODY", holdID, "CV", card.TS, root)
				require.Equal(t, http.StatusOK, status)
			}},
		{name: "NonStewardSubmission", user: "UNOBODY", want: "You can't approve this hold: <@UNOBODY> is not a steward; only stewards may decide holds. Nothing was changed. Stewards can decide it here",
			act: func(t *testing.T, holdID string, card fakeslack.Call, root string) {
				status, _ := tb.submitReview(t, "UNOBODY", holdID, review{decision: "approve", output: ptr("# Mine\n\ntaken over")})
				require.Equal(t, http.StatusOK, status)
			}},
		{name: "RequesterSubmission", user: "USTEWARD2", requester: "USTEWARD2", want: "You can't approve this hold: <@USTEWARD2> asked for this run and may not approve it",
			act: func(t *testing.T, holdID string, card fakeslack.Call, root string) {
				status, _ := tb.submitReview(t, "USTEWARD2", holdID, review{decision: "approve"})
				require.Equal(t, http.StatusOK, status)
			}},
		{name: "EditFailsAGuard", user: "USTEWARD", want: "fails the Guard check not_contains",
			act: func(t *testing.T, holdID string, card fakeslack.Call, root string) {
				status, _ := tb.submitReview(t, "USTEWARD", holdID, review{decision: "approve", comment: "ok", output: ptr("# Kelp\n\nFORBIDDEN text")})
				require.Equal(t, http.StatusOK, status)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tb.ts()
			tb.event(t, "Ev"+tc.name, mention("CV", orDefault(tc.requester, "U1"), root, "", "guarded Kelp\nKelp forests sway."))
			card, holdID := tb.holdCard(t, "CV", root)
			before := len(tb.slack.Views())
			tc.act(t, holdID, card, root)
			// In the hold's thread: another case's refusal may say the same.
			eph := tb.waitEphemeral(t, tc.user, func(s string) bool { return strings.Contains(s, tc.want) }, root)
			require.Equal(t, []string{"CV", root}, []string{eph.Form["channel"], eph.Form["thread_ts"]})
			require.Contains(t, eph.Form["text"], "Nothing was changed")
			tb.quiet(t)
			h, err := tb.store.HoldGetByID(tb.ctx, holdID)
			require.NoError(t, err)
			require.Equal(t, store.HoldOpen, h.Status, "the hold stays open")
			require.Nil(t, h.EditedOutput)
			require.Empty(t, tb.updates("CV", card.TS), "the card is untouched")
			require.Len(t, tb.slack.Views(), before, "no modal for a refusal")
			for _, p := range tb.posts("CV", root) {
				require.NotContains(t, p.Form["text"], "Memo dispatched", "nothing was published")
			}
		})
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// TestReviewRejectionWithAnEditedBox: the modal always sends its output
// box; a steward who edited it and then chose Reject rejects, and the edit
// is dropped rather than refusing the rejection.
func TestReviewRejectionWithAnEditedBox(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.guardedWorkflow(t)
	root := tb.ts()
	tb.event(t, "EvRe1", mention("CR", "U1", root, "", "guarded Kelp\nKelp forests sway."))
	_, holdID := tb.holdCard(t, "CR", root)
	status, _ := tb.submitReview(t, "USTEWARD", holdID, review{decision: "reject", comment: "off topic", output: ptr("# Kelp\n\nother words")})
	require.Equal(t, http.StatusOK, status)
	tb.waitEphemeral(t, "USTEWARD", func(s string) bool { return strings.Contains(s, "You rejected") }, root)
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldRejected, h.Status)
	require.Equal(t, "off topic", h.Comment)
	require.Nil(t, h.EditedOutput, "the edit is dropped with the rejection")
}

// TestReviewModalCases: a long output is edited in the console, not the
// modal; a decided hold opens no modal and says who decided.
func TestReviewModalCases(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvL1", mention("CL", "U1", root, "", "draft-memo Long\n"+strings.Repeat("Kelp sways in the current. ", 150)))
	card, holdID := tb.holdCard(t, "CL", root)
	status, _ := tb.reviewClick(t, "USTEWARD", holdID, "CL", card.TS, root)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, tb.slack.Views(), 1)
	view := viewOf(t, tb.slack.Views()[0])
	require.Nil(t, blockByID(view, "output"), "longer than 3,000 characters: no edit box")
	require.Contains(t, unescapeJSON(string(tb.slack.Views()[0].View)), "http://holdfast.test/holds/"+holdID, "the console link instead")
	require.NotNil(t, blockByID(view, "decision"))

	status, _ = tb.submitReview(t, "USTEWARD", holdID, review{decision: "reject", comment: "too long"})
	require.Equal(t, http.StatusOK, status)
	tb.waitEphemeral(t, "USTEWARD", func(s string) bool { return strings.Contains(s, "You rejected") })
	status, _ = tb.reviewClick(t, "USTEWARD2", holdID, "CL", card.TS, root)
	require.Equal(t, http.StatusOK, status)
	eph := tb.waitEphemeral(t, "USTEWARD2", func(s string) bool { return strings.Contains(s, "Nothing to review") })
	require.Contains(t, eph.Form["text"], "already rejected by <@USTEWARD> via slack")
	require.Len(t, tb.slack.Views(), 1, "no modal for a decided hold")
}

// TestReviewWhenSlackRefusesTheModal: a views.open Slack refuses (an
// expired trigger) or does not answer in time is answered with why, in
// words a steward can act on (not a Go error), and a way on; nothing
// changes.
func TestReviewWhenSlackRefusesTheModal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, trigger, why string
		slow               bool
	}{
		{name: "Expired", trigger: fakeslack.ExpiredTrigger, why: "Slack answered `expired_trigger_id`"},
		{name: "TooSlow", trigger: "trig-slow", slow: true, why: "Slack did not answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := standIns()
			eng := newRecordingEngine()
			eng.stewards["USTEWARD"] = true
			o.engine = func(*testBundle) bridge.Engine { return eng }
			tb := setup(t, o)
			if tc.slow {
				tb.slack.Delay("views.open", 5*time.Second)
			}
			root := tb.ts()
			tb.event(t, "EvW0", mention("CW", "U1", root, "", "hello"))
			tb.inboxDrained(t)
			holdID := tb.openHold(t, tb.threadSession(t, "CW", root).ID)
			status, _ := tb.interact(t, map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"},
				"channel": map[string]any{"id": "CW"}, "message": map[string]any{"ts": "1.5", "thread_ts": root}, "trigger_id": tc.trigger,
				"actions": []any{map[string]any{"action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID}}})
			require.Equal(t, http.StatusOK, status)
			eph := tb.waitEphemeral(t, "USTEWARD", func(s string) bool { return strings.Contains(s, "could not open the review") })
			require.Contains(t, eph.Form["text"], tc.why)
			require.NotContains(t, eph.Form["text"], "http://127.0.0.1", "no Go error text")
			require.NotContains(t, eph.Form["text"], "context deadline")
			require.Contains(t, eph.Form["text"], "http://holdfast.test/holds/"+holdID)
			_, decides := eng.snapshot()
			require.Empty(t, decides)
		})
	}
}
