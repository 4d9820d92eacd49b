package bridge_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// people makes users.info answer for the test's two speakers.
func people(tb *testBundle) {
	tb.slack.SetUser("U1", "ada", "Ada", "Ada Lovelace")
	tb.slack.SetUser("U2", "bob", "", "Bob Babbage") // no display name: the real name serves
}

// summaryPost waits for the summarize-thread reply in a thread.
func (tb *testBundle) summaryPost(t *testing.T, channel, root string) fakeslack.Call {
	t.Helper()
	return tb.waitPost(t, channel, root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Summary of this thread") })
}

// requireInOrder requires each of says in s, in that order.
func requireInOrder(t *testing.T, s string, says ...string) {
	t.Helper()
	at := 0
	for _, w := range says {
		i := strings.Index(s[at:], w)
		require.GreaterOrEqual(t, i, 0, "%q (after position %d) in:\n%s", w, at, s)
		at += i + len(w)
	}
}

// transcript is the session's events of a thread.
func (tb *testBundle) transcript(t *testing.T, channel, root string) []*store.Event {
	t.Helper()
	evs, err := threadEvents(tb.store, channel, root)
	require.NoError(t, err)
	return evs
}

// threadEvents reads a thread session's events; it reports rather than
// fails, so a condition polled off the test goroutine may call it.
func threadEvents(s store.Store, channel, root string) ([]*store.Event, error) {
	ses, err := s.SessionGetByTag(context.Background(), "slack:"+channel+":"+root)
	if err != nil {
		return nil, err
	}
	return s.EventList(context.Background(), &store.EventListParams{SessionID: ses.ID, Limit: 1000})
}

// backfilledCount is how many backfilled events a thread's session holds
// (0 when it cannot be read yet); safe off the test goroutine.
func backfilledCount(s store.Store, channel, root string) int {
	evs, err := threadEvents(s, channel, root)
	if err != nil {
		return 0
	}
	return len(backfilled(evs))
}

type said struct{ typ, speaker, text string }

// backfilled is the backfilled messages of a transcript, as recorded.
func backfilled(evs []*store.Event) []said {
	var out []said
	for _, e := range evs {
		if e.Payload["backfilled"] == true {
			speaker, _ := e.Payload["speaker"].(string)
			text, _ := e.Payload["text"].(string)
			out = append(out, said{e.Type, speaker, text})
		}
	}
	return out
}

// TestSummarizeThreadOfFour: a thread of four messages by two people, the
// bot in it from the first, is summarised with every message attributed.
func TestSummarizeThreadOfFour(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root := tb.ts()
	tb.event(t, "EvF1", mention("CF", "U1", root, "", "we need a launch date"))
	tb.event(t, "EvF2", message("CF", "U2", tb.ts(), root, "Monday is too soon"))
	tb.event(t, "EvF3", message("CF", "U1", tb.ts(), root, "Tuesday then?"))
	tb.event(t, "EvF4", message("CF", "U2", tb.ts(), root, "Tuesday works for support"))
	tb.event(t, "EvF5", mention("CF", "U2", tb.ts(), root, "summarize-thread"))
	requireInOrder(t, text(tb.summaryPost(t, "CF", root)), "*Summary of this thread*",
		"*Ada*: we need a launch date", "*Bob Babbage*: Monday is too soon", "*Ada*: Tuesday then?", "*Bob Babbage*: Tuesday works for support")
	require.Len(t, tb.slack.Delivered("users.info"), 2, "each speaker's name is asked once, then cached")
	require.Empty(t, tb.slack.Calls("conversations.replies"), "a thread the bot was in from its start needs no backfill")
}

// changed is Slack's message_changed event: msg (a message() map) as it
// now reads, after it read was.
func changed(msg map[string]any, was string) map[string]any {
	prev := maps.Clone(msg)
	prev["text"] = was
	now := maps.Clone(msg)
	now["edited"] = map[string]any{"user": msg["user"], "ts": "1.1"}
	return map[string]any{"type": "message", "subtype": "message_changed", "hidden": true, "channel": msg["channel"],
		"channel_type": msg["channel_type"], "ts": "1.1", "event_ts": "1.1", "message": now, "previous_message": prev}
}

// deleted is Slack's message_deleted event of msg.
func deleted(msg map[string]any) map[string]any {
	return map[string]any{"type": "message", "subtype": "message_deleted", "hidden": true, "channel": msg["channel"],
		"channel_type": msg["channel_type"], "ts": "1.2", "event_ts": "1.2", "deleted_ts": msg["ts"], "previous_message": msg}
}

// TestSummarizeThreadAfterEditsAndDeletions: a message edited in Slack is
// summarised as it now reads and one deleted is left out, as the thread
// shows them in Slack; the transcript keeps what was first said and
// records the change. The bot's own edits (its cards) and changes in
// threads it is not part of record nothing.
func TestSummarizeThreadAfterEditsAndDeletions(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root := tb.ts()
	tb.event(t, "EvE1", mention("CE", "U1", root, "", "we need a launch date"))
	monday := message("CE", "U2", tb.ts(), root, "Monday is too soon")
	tb.event(t, "EvE2", monday)
	tuesday := message("CE", "U1", tb.ts(), root, "Tuesday then?")
	tb.event(t, "EvE3", tuesday)
	now := maps.Clone(monday)
	now["text"] = "Monday works, see <https://plan.test|the plan>"
	tb.event(t, "EvE4", changed(now, "Monday is too soon"))
	tb.event(t, "EvE5", deleted(tuesday))
	own := message("CE", fakeslack.BotUserID, tb.ts(), root, "a card")
	own["bot_id"] = fakeslack.BotID
	tb.event(t, "EvE6", changed(own, "the card before"))
	elsewhere := tb.ts()
	tb.event(t, "EvE7", changed(message("CE", "U1", tb.ts(), elsewhere, "elsewhere"), "a thread I am not in"))
	tb.event(t, "EvE8", mention("CE", "U2", tb.ts(), root, "summarize-thread"))

	summary := text(tb.summaryPost(t, "CE", root))
	requireInOrder(t, summary, "*Ada*: we need a launch date", "*Bob Babbage*: Monday works, see <https://plan.test|the plan>", "*Bob Babbage*: summarize-thread")
	require.NotContains(t, summary, "too soon")
	require.NotContains(t, summary, "Tuesday")

	var types []string
	for _, e := range tb.transcript(t, "CE", root) {
		types = append(types, e.Type)
		if e.Type == "message_edited" {
			require.Equal(t, "Monday works, see [the plan](https://plan.test)", e.Payload["text"], "recorded as markdown")
			require.Equal(t, "slack:U2", e.Actor)
		}
	}
	require.Equal(t, 1, strings.Count(strings.Join(types, " "), "message_edited"), "the bot's own edit is not recorded: %v", types)
	require.Contains(t, types, "message_deleted")
	_, err := tb.store.SessionGetByTag(tb.ctx, "slack:CE:"+elsewhere)
	require.ErrorIs(t, err, store.ErrNotFound, "a change starts no session")
}

// seedThread puts a thread the bot never saw into the fake: Ada's root,
// Bob's reply, an earlier bot message, Ada's second reply, then n more
// replies by Bob. It answers the root's ts.
func seedThread(tb *testBundle, channel string, n int) (root string, texts []string) {
	root = tb.ts()
	tb.slack.Seed(fakeslack.Message{Channel: channel, TS: root, User: "U1", Text: "Launch on Monday?"})
	tb.slack.Seed(fakeslack.Message{Channel: channel, TS: tb.ts(), ThreadTS: root, User: "U2", Text: "Release notes are not done &amp; support is out"})
	tb.slack.Seed(fakeslack.Message{Channel: channel, TS: tb.ts(), ThreadTS: root, User: fakeslack.BotUserID, BotID: fakeslack.BotID, Text: "Queued earlier"})
	tb.slack.Seed(fakeslack.Message{Channel: channel, TS: tb.ts(), ThreadTS: root, User: "U1", Text: "Tuesday then"})
	texts = []string{"Launch on Monday?", "Release notes are not done & support is out", "Queued earlier", "Tuesday then"}
	for i := range n {
		tb.slack.Seed(fakeslack.Message{Channel: channel, TS: tb.ts(), ThreadTS: root, User: "U2", Text: "more " + string(rune('a'+i))})
		texts = append(texts, "more "+string(rune('a'+i)))
	}
	return root, texts
}

// TestLateMentionBackfillsTheThread: a mention in a thread whose earlier
// messages only Slack knows fetches them once (conversations.replies),
// records them oldest first as backfilled events (the bot's own as
// assistant messages, never posted again), before the mention; the summary
// includes them.
func TestLateMentionBackfillsTheThread(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root, _ := seedThread(tb, "CL", 0)
	mentionTS := tb.ts()
	tb.event(t, "EvL1", mention("CL", "U2", mentionTS, root, "summarize-thread"))
	requireInOrder(t, text(tb.summaryPost(t, "CL", root)), "*Ada*: Launch on Monday?", "*Bob Babbage*: Release notes are not done &amp; support is out",
		"*Holdfast*: Queued earlier", "*Ada*: Tuesday then", "*Bob Babbage*: summarize-thread")

	evs := tb.transcript(t, "CL", root)
	require.Equal(t, []said{
		{store.EventUserMessage, "Ada", "Launch on Monday?"},
		{store.EventUserMessage, "Bob Babbage", "Release notes are not done & support is out"},
		{store.EventAssistantMessage, "Holdfast", "Queued earlier"},
		{store.EventUserMessage, "Ada", "Tuesday then"},
	}, backfilled(evs), "oldest first, speakers named")
	for i, e := range evs[:4] {
		require.Equal(t, true, e.Payload["backfilled"], "the backfill is recorded before the mention (event %d)", i)
	}
	require.Equal(t, "summarize-thread", evs[4].Payload["text"])
	require.Equal(t, "Bob Babbage", evs[4].Payload["speaker"])

	replies := tb.slack.Calls("conversations.replies")
	require.Len(t, replies, 1, "fetched once")
	require.Equal(t, mentionTS, replies[0].Form["latest"], "only what came before the mention")
	require.Equal(t, "0", replies[0].Form["inclusive"])

	// A second mention fetches nothing again, and the bot's old message is
	// never posted again by the mirror.
	tb.event(t, "EvL2", mention("CL", "U1", tb.ts(), root, "status"))
	tb.idle(t)
	require.Len(t, tb.slack.Calls("conversations.replies"), 1)
	n := 0
	for _, m := range tb.slack.Messages("CL") {
		if m.Text == "Queued earlier" {
			n++
		}
	}
	require.Equal(t, 1, n)
}

// TestBackfillRateLimitedAnswersAtOnce: conversations.replies answering
// 429 leaves the mention answered well within 2 s with what it has (the
// mention itself); Retry-After is honoured, and the backfill lands later.
func TestBackfillRateLimitedAnswersAtOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root, _ := seedThread(tb, "CR", 0)
	tb.slack.FailMethod("conversations.replies", 1, http.StatusTooManyRequests, 1)
	start := time.Now()
	tb.event(t, "EvR1", mention("CR", "U2", tb.ts(), root, "summarize-thread"))
	first := tb.summaryPost(t, "CR", root)
	t.Logf("the mention is answered %v after its delivery", first.At.Sub(start))
	require.Less(t, first.At.Sub(start), 2*time.Second, "the mention is answered within 2 s")
	require.NotContains(t, text(first), "Launch on Monday?", "answered with what the backfill had: nothing yet")
	require.Contains(t, text(first), "*Bob Babbage*: summarize-thread")

	tb.eventually(t, func() bool { return backfilledCount(tb.store, "CR", root) == 4 }, 10*time.Second)
	calls := tb.slack.Calls("conversations.replies")
	require.Len(t, calls, 2)
	require.Equal(t, http.StatusTooManyRequests, calls[0].Status)
	require.GreaterOrEqual(t, calls[1].At.Sub(calls[0].At), time.Second, "Retry-After is honoured")

	// The next summary has the whole thread, in the order it was said.
	tb.event(t, "EvR2", mention("CR", "U1", tb.ts(), root, "summarize-thread again"))
	second := tb.waitPost(t, "CR", root, func(c fakeslack.Call) bool {
		return strings.Contains(text(c), "Summary of this thread") && strings.Contains(text(c), "again")
	})
	requireInOrder(t, text(second), "*Ada*: Launch on Monday?", "*Holdfast*: Queued earlier", "*Ada*: Tuesday then",
		"*Bob Babbage*: summarize-thread", "*Ada*: summarize-thread again")
}

// TestBackfillSlowSlackAnswersWithin2s: a conversations.replies that does
// not answer holds the mention no longer than the backfill's wait; the
// mention is answered within 2 s and the backfill lands when Slack answers.
func TestBackfillSlowSlackAnswersWithin2s(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root, texts := seedThread(tb, "CW", 0)
	tb.slack.Delay("conversations.replies", 3*time.Second)
	start := time.Now()
	tb.event(t, "EvW1", mention("CW", "U2", tb.ts(), root, "summarize-thread"))
	first := tb.summaryPost(t, "CW", root)
	t.Logf("the mention is answered %v after its delivery", first.At.Sub(start))
	require.Less(t, first.At.Sub(start), 2*time.Second, "the mention is answered within 2 s")
	require.NotContains(t, text(first), "Launch on Monday?")
	tb.slack.Delay("conversations.replies", 0)
	require.Eventually(t, func() bool { return backfilledCount(tb.store, "CW", root) == len(texts) }, 15*time.Second, 10*time.Millisecond)
}

// TestBackfillUnderSlackLimits: with Slack's limits for non-Marketplace
// apps (a small page, one call per window) the mention is answered with
// the first page and the rest follows page by page, each message once.
func TestBackfillUnderSlackLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	root, texts := seedThread(tb, "CP", 3)
	tb.slack.CapPages("conversations.replies", 2)
	tb.slack.RateLimit("conversations.replies", 1, time.Second)
	start := time.Now()
	tb.event(t, "EvP1", mention("CP", "U1", tb.ts(), root, "summarize-thread"))
	first := tb.summaryPost(t, "CP", root)
	t.Logf("the mention is answered %v after its delivery", first.At.Sub(start))
	require.Less(t, first.At.Sub(start), 2*time.Second)
	requireInOrder(t, text(first), "*Ada*: Launch on Monday?", "*Bob Babbage*: Release notes", "*Ada*: summarize-thread")
	require.NotContains(t, text(first), "Tuesday then", "the first page only")

	require.Eventually(t, func() bool { return backfilledCount(tb.store, "CP", root) == len(texts) }, 20*time.Second, 10*time.Millisecond)
	var got []string
	for _, s := range backfilled(tb.transcript(t, "CP", root)) {
		got = append(got, s.text)
	}
	require.Equal(t, texts, got, "every message once, oldest first")
	var ok []fakeslack.Call
	for _, c := range tb.slack.Calls("conversations.replies") {
		if c.Status == http.StatusOK {
			ok = append(ok, c)
		}
	}
	require.Len(t, ok, 4, "four pages of at most two")
	for i := 1; i < len(ok); i++ {
		require.GreaterOrEqual(t, ok[i].At.Sub(ok[i-1].At), 900*time.Millisecond, "no page before Slack allows it")
	}
	bf, err := tb.store.SlackBackfillGet(tb.ctx, tb.transcript(t, "CP", root)[0].SessionID)
	require.NoError(t, err)
	require.True(t, bf.Done)
	require.Equal(t, len(texts), bf.Fetched)
}

// TestBackfillResumesAfterRestart: a backfill Slack cannot serve before the
// process stops is finished by the next process, from its stored cursor,
// and a second replica running at once records nothing twice.
func TestBackfillResumesAfterRestart(t *testing.T) {
	t.Parallel()
	o := setupOpts{real: true, noStart: true}
	tb := setup(t, o)
	people(tb)
	root, texts := seedThread(tb, "CX", 2)
	tb.slack.CapPages("conversations.replies", 3)
	tb.slack.FailMethod("conversations.replies", 1000, http.StatusInternalServerError, 0)
	cfg := bridge.Config{SigningSecret: secret, Tick: 50 * time.Millisecond, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		BackfillWait: 100 * time.Millisecond}
	first := bridge.New(cfg, tb.store, apiFor(tb), tb.engine, tb.sessions, discard())
	ctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = first.Start(ctx) }()
	mentionTS := tb.ts()
	status, _ := tb.post(t, "/slack/events", "application/json", eventBody("EvX1", mention("CX", "U1", mentionTS, root, "summarize-thread")))
	require.Equal(t, http.StatusOK, status)
	// The first bridge's handler is not the router's; it takes the
	// delivery from the shared inbox all the same.
	tb.eventually(t, func() bool { return len(tb.slack.Calls("conversations.replies")) >= 3 }, 10*time.Second)
	cancel()
	<-done
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:CX:"+root)
	require.NoError(t, err)
	bf, err := tb.store.SlackBackfillGet(tb.ctx, ses.ID)
	require.NoError(t, err)
	require.False(t, bf.Done)
	require.NotEmpty(t, bf.LastError)

	// Slack recovers; two replicas start on the same store.
	tb.slack.ClearFailures("conversations.replies")
	for range 2 {
		runBridge(t, tb, bridge.New(cfg, tb.store, apiFor(tb), tb.engine, tb.sessions, discard()))
	}
	tb.eventually(t, func() bool {
		bf, err := tb.store.SlackBackfillGet(tb.ctx, ses.ID)
		return err == nil && bf.Done
	}, 10*time.Second)
	var got []string
	for _, s := range backfilled(tb.transcript(t, "CX", root)) {
		got = append(got, s.text)
	}
	require.Equal(t, texts, got, "each message once, in order")
}

// TestShortcutBackfillsTheThread: the "Run a workflow" shortcut on a reply
// in a thread the bot never saw enqueues in that thread's session as a
// mention there would (SPEC §5): the thread's messages are fetched first,
// so summarize-thread summarizes them.
func TestShortcutBackfillsTheThread(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	people(tb)
	root, _ := seedThread(tb, "CK", 0)
	replyTS := tb.ts()
	tb.slack.Seed(fakeslack.Message{Channel: "CK", TS: replyTS, ThreadTS: root, User: "U2", Text: "Wednesday at the latest"})
	status, _ := tb.interact(t, map[string]any{"type": "message_action", "callback_id": "run_workflow", "trigger_id": "trig-bf",
		"user": map[string]any{"id": "U1"}, "channel": map[string]any{"id": "CK"}, "message_ts": replyTS,
		"message": map[string]any{"type": "message", "ts": replyTS, "thread_ts": root, "user": "U2", "text": "Wednesday at the latest"}})
	require.Equal(t, http.StatusOK, status)
	require.Len(t, tb.slack.Views(), 1)
	view := viewOf(t, tb.slack.Views()[0])
	status, _ = tb.interact(t, map[string]any{"type": "view_submission", "user": map[string]any{"id": "U1"},
		"view": map[string]any{"id": "VRUNBF", "type": "modal", "callback_id": "run_workflow", "private_metadata": view["private_metadata"],
			"state": map[string]any{"values": map[string]any{
				"workflow": map[string]any{"workflow": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": "/summarize-thread"}}},
				"brief":    map[string]any{"brief": map[string]any{"type": "plain_text_input", "value": ""}},
			}}}})
	require.Equal(t, http.StatusOK, status)
	requireInOrder(t, text(tb.summaryPost(t, "CK", root)), "*Ada*: Launch on Monday?", "*Bob Babbage*: Release notes are not done &amp; support is out",
		"*Ada*: Tuesday then", "*Bob Babbage*: Wednesday at the latest")
	require.Equal(t, []said{
		{store.EventUserMessage, "Ada", "Launch on Monday?"},
		{store.EventUserMessage, "Bob Babbage", "Release notes are not done & support is out"},
		{store.EventAssistantMessage, "Holdfast", "Queued earlier"},
		{store.EventUserMessage, "Ada", "Tuesday then"},
		{store.EventUserMessage, "Bob Babbage", "Wednesday at the latest"},
	}, backfilled(tb.transcript(t, "CK", root)), "the thread as it stood, oldest first")
	require.Len(t, tb.slack.Calls("conversations.replies"), 1, "fetched once")
}
