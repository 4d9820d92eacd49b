package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// appendEvent writes a transcript event as the engine does.
func (tb *testBundle) appendEvent(t *testing.T, sessionID, typ string, payload map[string]any) {
	t.Helper()
	_, err := tb.store.EventAppend(tb.ctx, &store.EventAppendParams{SessionID: sessionID, Type: typ, Actor: "engine", Payload: payload})
	require.NoError(t, err)
	tb.bridge.Wake()
}

func TestMirrorRunLifecycle(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = func(c *bridge.Config) { c.HoldsChannel = "CHOLDS" }
	tb := setup(t, o)
	root := tb.ts()
	tb.event(t, "EvL0", mention("C5", "U1", root, "", "help"))
	tb.inboxDrained(t)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C5:"+root)
	require.NoError(t, err)

	tb.appendEvent(t, ses.ID, "run_started", map[string]any{"runId": "run_1", "itemId": "itm_1", "command": "/draft-memo"})
	tb.appendEvent(t, ses.ID, "run_step", map[string]any{"runId": "run_1", "step": 1, "kind": "context", "status": "succeeded"})
	tb.appendEvent(t, ses.ID, "hold_opened", map[string]any{"holdId": "hld_1", "runId": "run_1", "command": "/draft-memo",
		"gateLabel": "Review draft", "preview": "# Otters\n\nThey **hold hands** <script>"})

	card := tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "hold:hld_1") })
	blocks := blocksOf(t, card)
	var actions map[string]any
	for _, b := range blocks {
		if b["type"] == "actions" {
			actions = b
		}
	}
	require.NotNil(t, actions)
	require.Equal(t, "hold:hld_1", actions["block_id"])
	els := actions["elements"].([]any)
	require.Len(t, els, 3)
	approve, reject, review := els[0].(map[string]any), els[1].(map[string]any), els[2].(map[string]any)
	require.Equal(t, []any{"hold_approve", "hld_1", "primary"}, []any{approve["action_id"], approve["value"], approve["style"]})
	require.Equal(t, []any{"hold_reject", "hld_1", "danger"}, []any{reject["action_id"], reject["value"], reject["style"]})
	require.Equal(t, []any{"hold_review", "hld_1", "Comment or edit…"}, []any{review["action_id"], review["value"],
		review["text"].(map[string]any)["text"]})
	require.Contains(t, text(card), "http://holdfast.test/holds/hld_1")
	require.Contains(t, text(card), "Review draft")
	require.Contains(t, text(card), "*hold hands*")
	require.Contains(t, text(card), "&lt;script&gt;", "the preview is escaped")
	require.NotContains(t, text(card), "preview shortened")
	holdsCard := tb.waitPost(t, "CHOLDS", "", func(c fakeslack.Call) bool { return strings.Contains(text(c), "hold:hld_1") })

	tb.appendEvent(t, ses.ID, "hold_decided", map[string]any{"holdId": "hld_1", "runId": "run_1", "status": "approved",
		"decidedBy": "slack:USTEWARD", "decidedVia": "slack", "comment": "ship <it>"})
	tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool {
		return strings.Contains(c.Form["text"], "*Approved* by <@USTEWARD> via slack")
	})
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.update")) == 2 }, 5*time.Second)
	updated := map[string]fakeslack.Call{}
	for _, u := range tb.slack.Delivered("chat.update") {
		updated[u.Form["channel"]] = u
	}
	require.Equal(t, card.TS, updated["C5"].Form["ts"], "the update refers to the ts the card was posted with")
	require.Equal(t, holdsCard.TS, updated["CHOLDS"].Form["ts"])
	for _, u := range updated {
		require.NotContains(t, text(u), "hold_approve", "buttons gone")
		require.Contains(t, text(u), "Approved")
		require.Contains(t, text(u), "ship &lt;it&gt;")
		require.Contains(t, text(u), "Review draft", "the card keeps what was held")
	}

	body := "# Otters\n\n" + strings.Repeat("Otters hold hands while they sleep. ", 200) + "\n\n- [link](https://example.com)\n"
	memo, err := tb.store.MemoCreate(tb.ctx, &store.MemoCreateParams{Title: "Otters", Body: body, Unlisted: true})
	require.NoError(t, err)
	tb.appendEvent(t, ses.ID, "memo_dispatched", map[string]any{"runId": "run_1", "memoId": memo.ID, "title": "Otters"})
	tb.appendEvent(t, ses.ID, "run_finished", map[string]any{"runId": "run_1", "status": "succeeded"})
	tb.appendEvent(t, ses.ID, "run_finished", map[string]any{"runId": "run_2", "status": "failed", "errorKind": "guard", "error": "too long"})
	tb.appendEvent(t, ses.ID, "run_finished", map[string]any{"runId": "run_3", "status": "cancelled", "errorKind": "cancelled",
		"error": "run cancelled by slack:U7"})
	tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool {
		return strings.Contains(c.Form["text"], "<http://holdfast.test/runs/run_2|The run> failed (guard): too long.")
	})
	tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool {
		return c.Form["text"] == ":x: <http://holdfast.test/runs/run_3|The run> was cancelled by <@U7>." // not "cancelled: run cancelled by"
	})

	var texts []string
	memoParts := 0
	for _, p := range tb.posts("C5", root) {
		texts = append(texts, text(p))
		if p.Form["blocks"] == "" {
			continue
		}
		bl := blocksOf(t, p)
		require.LessOrEqual(t, len(bl), 50, "Slack's block limit")
		for _, b := range bl {
			if tx, ok := b["text"].(map[string]any); ok {
				require.LessOrEqual(t, len([]rune(tx["text"].(string))), 3000, "Slack's section limit")
			}
		}
		if strings.Contains(text(p), "Otters hold hands") {
			memoParts++
		}
	}
	require.GreaterOrEqual(t, memoParts, 1)
	all := strings.Join(texts, "\n")
	require.Contains(t, all, "<http://holdfast.test/memos/"+memo.ID+"|Otters>")
	require.Contains(t, all, "<https://example.com|link>")
	require.Contains(t, all, "Started `/draft-memo`")
	require.NotContains(t, all, "run_1` succeeded", "success is the memo, not a line")

	// Order in the thread follows the transcript.
	idx := func(s string) int { return strings.Index(all, s) }
	require.Less(t, idx("Started"), idx("hold:hld_1"))
	require.Less(t, idx("hold:hld_1"), idx("*Approved*"))
	require.Less(t, idx("*Approved*"), idx("Memo dispatched"))
	require.Less(t, idx("Memo dispatched"), idx("run_2"))

	// A long output's preview is its first section, marked as shortened.
	long := strings.Repeat("Kelp sways in the current. ", 400)
	tb.appendEvent(t, ses.ID, "hold_opened", map[string]any{"holdId": "hld_2", "runId": "run_3", "command": "/draft-memo",
		"gateLabel": "Review draft", "preview": long})
	long2 := tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "hold:hld_2") })
	require.Contains(t, text(long2), "preview shortened")
	tb.waitPost(t, "CHOLDS", "", func(c fakeslack.Call) bool { return strings.Contains(text(c), "hold:hld_2") })
	for _, b := range blocksOf(t, long2) {
		if tx, ok := b["text"].(map[string]any); ok {
			require.LessOrEqual(t, len([]rune(tx["text"].(string))), 3000)
		}
	}

	// Nothing is mirrored twice, even when woken again.
	n := len(tb.slack.Calls(""))
	tb.bridge.Wake()
	tb.appendEvent(t, ses.ID, "assistant_message", map[string]any{"text": "done"})
	tb.waitPost(t, "C5", root, func(c fakeslack.Call) bool { return c.Form["text"] == "done" })
	require.Len(t, tb.slack.Calls(""), n+1)
}

func TestOutboxSurvivesOutage(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = func(c *bridge.Config) { c.Senders = 2 }
	tb := setup(t, o)
	// Slack is down, then rate limits, then recovers.
	tb.slack.FailNext(6, http.StatusInternalServerError, 0)
	tb.slack.FailNext(2, http.StatusTooManyRequests, 1)

	roots := []string{tb.ts(), tb.ts(), tb.ts()}
	var sessions []string
	for i, root := range roots {
		ses, err := tb.store.SessionCreate(tb.ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack",
			Tags: []string{"slack:C6:" + root}, Policy: "auto"})
		require.NoError(t, err)
		sessions = append(sessions, ses.ID)
		_ = i
	}
	const per = 5
	for i := range per {
		for j, id := range sessions {
			tb.appendEvent(t, id, "assistant_message", map[string]any{"text": fmt.Sprintf("thread %d message %d", j, i)})
		}
	}
	require.Eventually(t, func() bool { return len(tb.slack.Delivered("chat.postMessage")) == per*len(roots) }, 20*time.Second, 10*time.Millisecond)
	for j, root := range roots {
		posts := tb.posts("C6", root)
		require.Len(t, posts, per, "every message arrives once")
		for i, p := range posts {
			require.Equal(t, fmt.Sprintf("thread %d message %d", j, i), p.Form["text"], "in order")
		}
	}
	var rateLimited, failed int
	for _, c := range tb.slack.Calls("chat.postMessage") {
		switch c.Status {
		case http.StatusTooManyRequests:
			rateLimited++
		case http.StatusInternalServerError:
			failed++
		}
	}
	require.Equal(t, 2, rateLimited)
	require.Equal(t, 6, failed)
	require.Len(t, tb.slack.Calls("chat.postMessage"), per*len(roots)+8)

	// The outbox counters tell the same story on /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(tb.bridge)
	tb.eventually(t, func() bool { return metric(t, reg, "holdfast_slack_outbox_sent_total") == per*3 }, 5*time.Second)
	require.Equal(t, float64(per*3), metric(t, reg, "holdfast_slack_outbox_queued_total"))
	require.Equal(t, float64(8), metric(t, reg, "holdfast_slack_outbox_retried_total"))
	require.Zero(t, metric(t, reg, "holdfast_slack_outbox_failed_total"))
}

// metric reads a counter's value from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

func TestOutboxRefusalKeptAsFailed(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = func(c *bridge.Config) { c.MaxRefusals = 2 }
	tb := setup(t, o)
	// A post Slack refuses outright (channel_not_found) is tried MaxRefusals
	// times and kept as failed, so is the update of that card, and the
	// thread goes on.
	require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k1", Queue: "C8:1.1", Method: store.SlackPost, Channel: "C8", ThreadTS: "1.1", Text: "first"}))
	require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k2", Queue: "C8:1.1", Method: store.SlackPost, Channel: fakeslack.ChannelGone, ThreadTS: "1.1", Text: "bad"}))
	require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k3", Queue: "C8:1.1", Method: store.SlackUpdate, Channel: "C8", RefKey: "k2", Text: "upd"}))
	require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k4", Queue: "C8:1.1", Method: store.SlackPost, Channel: "C8", ThreadTS: "1.1", Text: "last"}))
	tb.waitPost(t, "C8", "1.1", func(c fakeslack.Call) bool { return c.Form["text"] == "last" })
	tb.eventually(t, func() bool {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "k4")
		return err == nil && m.Status == store.SlackOutboxSentSt
	}, 5*time.Second)
	for key, status := range map[string]string{"k1": "sent", "k2": "failed", "k3": "failed", "k4": "sent"} {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, key)
		require.NoError(t, err)
		require.Equal(t, status, m.Status, key)
	}
	require.Empty(t, tb.slack.Calls("chat.update"))
	m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "k2")
	require.NoError(t, err)
	require.Equal(t, 2, m.Attempts)
	require.Equal(t, "channel_not_found", m.LastError)
}

func (tb *testBundle) addOutbox(m *store.SlackOutboxAddParams) error {
	_, err := tb.store.SlackOutboxAdd(tb.ctx, []*store.SlackOutboxAddParams{m})
	tb.bridge.Wake()
	return err
}

// TestOutboxSurvivesRestart: writes queued while Slack is down stay in the
// store across a restart and are delivered, once, by the next process.
func TestOutboxSurvivesRestart(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.noStart = true
	tb := setup(t, o)
	tb.slack.FailNext(1000, http.StatusServiceUnavailable, 0)
	ses, err := tb.store.SessionCreate(tb.ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack",
		Tags: []string{"slack:CR:1.000001"}, Policy: "auto"})
	require.NoError(t, err)
	for i := range 3 {
		tb.appendEvent(t, ses.ID, "assistant_message", map[string]any{"text": fmt.Sprintf("reply %d", i)})
	}

	// A send cut short leaves its claim to lapse (ClaimLease), as a death
	// mid-post would: short here, so the next process need not wait long.
	first := bridge.New(bridge.Config{Tick: 20 * time.Millisecond, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		ClaimLease: 300 * time.Millisecond}, tb.store, apiFor(tb), newRecordingEngine(), tb.sessions, discard())
	ctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = first.Start(ctx) }()
	tb.eventually(t, func() bool { return len(tb.slack.Calls("chat.postMessage")) >= 3 }, 10*time.Second)
	cancel() // the process dies while Slack is down, perhaps mid-post
	<-done
	require.Empty(t, tb.slack.Delivered("chat.postMessage"))

	tb.slack.Recover()
	second := bridge.New(bridge.Config{Tick: 20 * time.Millisecond}, tb.store, apiFor(tb), newRecordingEngine(),
		tb.sessions, discard())
	runBridge(t, tb, second)
	tb.eventually(t, func() bool { return len(tb.posts("CR", "1.000001")) == 3 }, 10*time.Second)
	for i, p := range tb.posts("CR", "1.000001") {
		require.Equal(t, fmt.Sprintf("reply %d", i), p.Form["text"])
	}
}

// TestMirrorKeepsLineBreaks: Slack shows every newline as a line break, and
// whoever wrote a reply or a memo line by line (a model's bullets, a list
// typed with •) sees it in the thread line by line, not run together.
func TestMirrorKeepsLineBreaks(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	root := tb.ts()
	tb.event(t, "EvLB0", mention("CLB", "U1", root, "", "help"))
	tb.inboxDrained(t)
	ses := tb.threadSession(t, "CLB", root)

	tb.appendEvent(t, ses.ID, "assistant_message", map[string]any{"text": "Plan:\n• a\n• b\nthen **ship** it"})
	reply := tb.waitPost(t, "CLB", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Plan:") })
	require.Equal(t, "Plan:\n• a\n• b\nthen *ship* it", sectionText(t, reply))

	tb.appendEvent(t, ses.ID, "memo_dispatched", map[string]any{"runId": "run_1", "memoId": "mem_1", "title": "Notes",
		"body": "# Notes\n\nfirst line\nsecond line\n\n> quoted\n> twice"})
	memo := tb.waitPost(t, "CLB", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "first line") })
	require.Equal(t, "*Notes*\n\nfirst line\nsecond line\n\n> quoted\n> twice", sectionText(t, memo))
}

// sectionText is the mrkdwn of a post's sections, one after another.
func sectionText(t *testing.T, c fakeslack.Call) string {
	t.Helper()
	var parts []string
	for _, b := range blocksOf(t, c) {
		if tx, ok := b["text"].(map[string]any); ok && b["type"] == "section" {
			parts = append(parts, tx["text"].(string))
		}
	}
	return strings.Join(parts, "\n\n")
}
