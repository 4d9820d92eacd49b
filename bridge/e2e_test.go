package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// holdCard finds the hold card posted into a thread and answers it with the
// hold id its actions block carries.
func (tb *testBundle) holdCard(t *testing.T, channel, root string) (fakeslack.Call, string) {
	t.Helper()
	card := tb.waitPost(t, channel, root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["blocks"], `"hold_approve"`) })
	for _, b := range blocksOf(t, card) {
		if b["type"] != "actions" {
			continue
		}
		holdID, ok := strings.CutPrefix(b["block_id"].(string), "hold:")
		require.True(t, ok)
		els := b["elements"].([]any)
		require.Len(t, els, 3)
		approve, reject, review := els[0].(map[string]any), els[1].(map[string]any), els[2].(map[string]any)
		require.Equal(t, []any{"hold_approve", holdID, "primary"}, []any{approve["action_id"], approve["value"], approve["style"]})
		require.Equal(t, []any{"hold_reject", holdID, "danger"}, []any{reject["action_id"], reject["value"], reject["style"]})
		require.Equal(t, []any{"hold_review", holdID}, []any{review["action_id"], review["value"]})
		require.Contains(t, text(card), "http://holdfast.test/holds/"+holdID)
		require.Contains(t, text(card), "hold `"+engine.ShortHoldID(holdID)+"`", "the short id a thread decision takes")
		requireWordsNotIDs(t, text(card))
		require.NotRegexp(t, "`run_[0-9a-z]+`", text(card), "the run is linked, not quoted")
		return card, holdID
	}
	t.Fatal("hold card without an actions block")
	return card, ""
}

// updates answers the chat.update calls of the message posted with ts.
func (tb *testBundle) updates(channel, ts string) []fakeslack.Call {
	var out []fakeslack.Call
	for _, c := range tb.slack.Delivered("chat.update") {
		if c.Form["channel"] == channel && c.Form["ts"] == ts {
			out = append(out, c)
		}
	}
	return out
}

// TestEndToEnd runs Slack over HTTP mode against the real router, engine,
// sessions runtime and API, with the example workflows.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})

	// A signed mention in a new thread gets a reply in that thread.
	root := tb.ts()
	tb.event(t, "EvE1", mention("CE", "U1", root, "", "hello"))
	helped := tb.waitPost(t, "CE", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Session commands") })
	require.Contains(t, text(helped), "draft-memo: Drafts", "the live workflows, as a mention types them")
	var shown []string
	for _, b := range blocksOf(t, helped) {
		if tx, ok := b["text"].(map[string]any); ok {
			shown = append(shown, tx["text"].(string))
		}
	}
	t.Logf("%q", shown)
	require.Regexp(t, "(?m)^Send `", strings.Join(shown, "\n"), "the closing sentence is not indented under the last bullet")

	// `@bot draft-memo <brief>` enqueues once though Slack delivers it three
	// times (and once more as a plain message event).
	ask := tb.ts()
	ev := mention("CE", "U1", ask, root, "draft-memo Otters\nOtters hold hands while they sleep.")
	for range 3 {
		tb.event(t, "EvE2", ev)
	}
	tb.event(t, "EvE3", message("CE", "U1", ask, root, ev["text"].(string)))
	card, holdID := tb.holdCard(t, "CE", root)
	require.Contains(t, text(card), "*Review draft* is waiting for a steward — Draft memo from brief (`/draft-memo`)")
	require.Contains(t, text(card), "Otters hold hands")
	_, again, err := tb.engine.Enqueue(tb.ctx, engine.EnqueueParams{Command: "/draft-memo", DedupeKey: "slack:CE:" + ask})
	require.NoError(t, err)
	require.False(t, again, "the item exists, once, under the message's dedupe key")
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:CE:"+root)
	require.NoError(t, err)
	require.Equal(t, store.OriginChannel, ses.Origin)
	started := 0
	for _, p := range tb.posts("CE", root) {
		if strings.Contains(p.Form["text"], "Started `/draft-memo`") {
			started++
			require.Contains(t, p.Form["text"], "<http://holdfast.test/runs/"+mustHold(t, tb, holdID).RunID+"|", "the run's page, linked")
		}
		// People read what a line links, not ids they cannot use.
		require.NotRegexp(t, "`(itm|run)_[0-9a-z]+`", p.Form["text"])
		requireWordsNotIDs(t, p.Form["text"])
	}
	require.Equal(t, 1, started, "one run")

	// A non-steward's click is refused, ephemerally, and changes nothing.
	require.Equal(t, http.StatusOK, tb.click(t, "UNOBODY", "hold_approve", holdID, "CE", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 1 }, 10*time.Second)
	eph := tb.slack.Delivered("chat.postEphemeral")[0]
	require.Equal(t, "UNOBODY", eph.Form["user"])
	require.Contains(t, eph.Form["text"], "can't approve this hold")
	tb.inboxDrained(t)
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status)
	require.Empty(t, tb.updates("CE", card.TS), "the card is untouched")

	// The requester may not approve their own item either.
	tb.event(t, "EvE4", mention("CE", "U1", tb.ts(), root, "approve mine"))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 2 }, 10*time.Second)

	// A steward's click resumes the run, updates the card and posts the memo.
	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_approve", holdID, "CE", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.updates("CE", card.TS)) == 1 }, 10*time.Second)
	upd := tb.updates("CE", card.TS)[0]
	require.NotContains(t, upd.Form["blocks"], "hold_approve", "buttons gone")
	require.Contains(t, text(upd), "*Approved* by <@USTEWARD> via slack")
	require.Contains(t, upd.Form["text"], "approved by <@USTEWARD>", "the notification's text names them as the card does")
	lead := tb.waitPost(t, "CE", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Memo dispatched") })
	memoPost := tb.waitPost(t, "CE", root, func(c fakeslack.Call) bool { return c.Form["blocks"] != "" && strings.Contains(text(c), "*Otters*") })
	require.Contains(t, text(memoPost), "Otters hold hands while they sleep.", "the memo, rendered to mrkdwn")
	h, err = tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Contains(t, text(lead), "|Otters>", "linked to the memo in the console")
	require.Contains(t, text(lead), "http://holdfast.test/memos/")
	require.Equal(t, store.HoldApproved, h.Status)
	require.Equal(t, "slack", h.DecidedVia)

	// A second click after the decision is told who decided; nothing moves.
	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_reject", holdID, "CE", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 3 }, 10*time.Second)
	require.Contains(t, tb.slack.Delivered("chat.postEphemeral")[2].Form["text"], "was already approved by <@USTEWARD> via slack", "a Slack user is named as Slack names them")

	// A decision in the console/API updates the card too.
	root2 := tb.ts()
	tb.event(t, "EvE5", mention("CE", "U1", root2, "", "run draft-memo Herons"))
	card2, hold2 := tb.holdCard(t, "CE", root2)
	body, _ := json.Marshal(map[string]any{"decision": "reject", "comment": "not now"})
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+"/api/holds/"+hold2+"/decision", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tb.keys[store.RoleSteward])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	tb.eventually(t, func() bool { return len(tb.updates("CE", card2.TS)) == 1 }, 10*time.Second)
	upd2 := tb.updates("CE", card2.TS)[0]
	require.NotContains(t, upd2.Form["blocks"], "hold_reject")
	require.Contains(t, text(upd2), "*Rejected*")
	require.Contains(t, text(upd2), "via api")
	require.Contains(t, text(upd2), "not now")
	tb.waitPost(t, "CE", root2, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "cancelled") })

	// A `reply` workflow posts its output into the thread.
	root3 := tb.ts()
	tb.event(t, "EvE6", mention("CE", "U1", root3, "", "summarize-thread What did we decide?"))
	tb.waitPost(t, "CE", root3, func(c fakeslack.Call) bool {
		return strings.Contains(text(c), "What did we decide?") && c.Form["blocks"] != ""
	})
}

// TestEndToEndThreadDecision: `@bot approve` from a steward decides the
// thread's open hold exactly as the button does.
func TestEndToEndThreadDecision(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	root := tb.ts()
	tb.event(t, "EvT1", mention("CT", "U1", root, "", "draft-memo Kelp forests"))
	card, holdID := tb.holdCard(t, "CT", root)
	tb.event(t, "EvT2", mention("CT", "USTEWARD", tb.ts(), root, "approve nice work"))
	tb.eventually(t, func() bool { return len(tb.updates("CT", card.TS)) == 1 }, 10*time.Second)
	require.Contains(t, text(tb.updates("CT", card.TS)[0]), "nice work")
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldApproved, h.Status)
	require.Equal(t, "nice work", h.Comment)
	tb.waitPost(t, "CT", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Memo dispatched") })

	// A rejection ends the run, and the thread is told by whom, named as
	// Slack names people.
	root2 := tb.ts()
	tb.event(t, "EvT3", mention("CT", "U1", root2, "", "draft-memo Kelp again"))
	tb.holdCard(t, "CT", root2)
	tb.event(t, "EvT4", mention("CT", "USTEWARD", tb.ts(), root2, "reject not this week"))
	ended := tb.waitPost(t, "CT", root2, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], ":x: ") })
	require.Regexp(t, "^:x: <http://holdfast.test/runs/run_[^|]+\\|The run> was cancelled: rejected by <@USTEWARD>: not this week\\.$", ended.Form["text"])
}

// TestEndToEndTwoApprovals: with Approvals 2 the first steward's click is
// acknowledged to them, and the card (same message) shows the approval so far
// with its buttons still there for the second steward; the decided card
// names both.
func TestEndToEndTwoApprovals(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	lib := library.New(tb.store, discard())
	wf := strings.Replace(strings.Replace(draftMemo(t), "`/draft-memo`", "`/pair-review`", 1),
		"- **Approval** `hold`", "- **Approval** `hold`\n- **Approvals** `2`", 1)
	_, _, err := lib.ImportWorkflow(tb.ctx, "Pair review", wf)
	require.NoError(t, err)

	root := tb.ts()
	tb.event(t, "EvP1", mention("CP", "U1", root, "", "pair-review Tides"))
	card, holdID := tb.holdCard(t, "CP", root)
	require.Contains(t, text(card), "needs 2 approvals")
	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_approve", holdID, "CP", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 1 }, 10*time.Second)
	require.Contains(t, tb.slack.Delivered("chat.postEphemeral")[0].Form["text"], "1 of 2")
	tb.eventually(t, func() bool { return len(tb.updates("CP", card.TS)) == 1 }, 10*time.Second)
	partial := tb.updates("CP", card.TS)[0]
	require.Contains(t, text(partial), "1 of 2 approvals: <@USTEWARD>")
	require.Contains(t, partial.Form["blocks"], `"hold_approve"`, "the buttons stay for the other stewards")
	require.Contains(t, partial.Form["blocks"], `"hold_reject"`)
	require.Contains(t, text(partial), "Tides", "still the same card: preview kept")
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status)

	// The same steward cannot count twice; the card does not change.
	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_approve", holdID, "CP", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 2 }, 10*time.Second)
	again := tb.slack.Delivered("chat.postEphemeral")[1].Form["text"]
	require.Contains(t, again, "you already approved this hold (1 of 2 approvals)")
	require.NotContains(t, again, "already decided", "the hold is still open: it was not decided")

	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD2", "hold_approve", holdID, "CP", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.updates("CP", card.TS)) == 2 }, 10*time.Second)
	final := tb.updates("CP", card.TS)[1]
	require.NotContains(t, final.Form["blocks"], "hold_approve", "decided: buttons gone")
	require.Contains(t, text(final), "*Approved* by <@USTEWARD> and <@USTEWARD2> via slack", "both approvals are named")
	tb.waitPost(t, "CP", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Memo dispatched") })
	require.Len(t, tb.updates("CP", card.TS), 2, "one update per accepted approval")
}

// TestEndToEndTokenBudgetHold: a Token budget hold's approval lets the
// run go on; its card says so, and never calls the output so far
// published (the run's output is published only at its end).
func TestEndToEndTokenBudgetHold(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	lib := library.New(tb.store, discard())
	wf := strings.Replace(strings.Replace(strings.Replace(draftMemo(t), "`/draft-memo`", "`/budget-draft`", 1),
		"- **Approval** `hold`", "- **Approval** `auto`\n- **Token budget** `5`", 1), "# Draft memo from brief", "# Budget draft", 1)
	_, _, err := lib.ImportWorkflow(tb.ctx, "", wf)
	require.NoError(t, err)

	root := tb.ts()
	tb.event(t, "EvB1", mention("CB", "U1", root, "", "budget-draft Tides rise twice daily"))
	card, holdID := tb.holdCard(t, "CB", root)
	require.Contains(t, text(card), "Token budget 5 passed")
	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_approve", holdID, "CB", card.TS, root))
	tb.eventually(t, func() bool { return len(tb.updates("CB", card.TS)) == 1 }, 10*time.Second)
	decided := text(tb.updates("CB", card.TS)[0])
	require.Contains(t, decided, "*Approved* by <@USTEWARD>")
	require.Contains(t, decided, "goes on past its Token budget")
	require.NotContains(t, decided, "Published")
	tb.waitPost(t, "CB", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Memo dispatched") })
}

// slowAckEngine is the real engine whose Enqueue returns only once release
// is closed: the run starts, and is mirrored, before the bridge can write
// its acknowledgement — the order a busy machine produces by chance.
type slowAckEngine struct {
	bridge.Engine
	release chan struct{}
}

func (e slowAckEngine) Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error) {
	it, created, err := e.Engine.Enqueue(ctx, p)
	select {
	case <-e.release:
	case <-ctx.Done():
	}
	return it, created, err
}

// TestQueuedAckPrecedesRunStarted: the thread reads "Queued …" before
// "Started …" even when the run starts and is mirrored before the enqueue
// call returns to the bridge.
func TestQueuedAckPrecedesRunStarted(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	tb := setup(t, setupOpts{real: true, wrap: func(e bridge.Engine) bridge.Engine { return slowAckEngine{e, release} }})
	root := tb.ts()
	tb.event(t, "EvQ1", mention("CQ", "U1", root, "", "draft-memo Lichens"))
	tb.waitPost(t, "CQ", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Started `/draft-memo`") })
	close(release)
	tb.holdCard(t, "CQ", root)
	tb.inboxDrained(t)
	// The bridge's own write, after the release, is the same message: it
	// must not post a second acknowledgement.
	tb.eventually(t, func() bool {
		m, err := tb.store.SlackOutboxNextDue(tb.ctx)
		return errors.Is(err, store.ErrNotFound) && m.IsZero()
	}, 10*time.Second, "outbox drained")
	var lines []string
	for _, c := range tb.posts("CQ", root) {
		switch {
		case strings.Contains(c.Form["text"], "Queued `draft-memo`"):
			lines = append(lines, "queued")
		case strings.Contains(c.Form["text"], "Started `/draft-memo`"):
			lines = append(lines, "started")
		}
	}
	require.Equal(t, []string{"queued", "started"}, lines)
}

func draftMemo(t *testing.T) string {
	t.Helper()
	b, err := workflow.Examples.ReadFile("examples/draft-memo.md")
	require.NoError(t, err)
	return string(b)
}
