package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// standIns runs the bridge with the real sessions runtime and a recording
// stand-in for the engine, for tests of the bridge's own behaviour.
func standIns() setupOpts {
	return setupOpts{engine: func(tb *testBundle) bridge.Engine { return newRecordingEngine() }}
}

func TestHTTPRefusals(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.noStart = true // nothing may reach the inbox at all
	tb := setup(t, o)
	good := eventBody("Ev1", message("C1", "U1", "1.000001", "", "hi"))
	now := time.Now().Unix()

	tests := []struct {
		name     string
		path     string
		body     []byte
		ts       int64
		sig      string
		noHeader bool
		status   int
		says     string // in the answer's message
	}{
		{name: "BadSignature", path: "/slack/events", body: good, ts: now, sig: "v0=" + strings.Repeat("ab", 32), status: http.StatusUnauthorized},
		{name: "SignatureOfOtherBody", path: "/slack/events", body: good, ts: now, sig: sign(now, []byte(`{"x":1}`)), status: http.StatusUnauthorized},
		{name: "NotHex", path: "/slack/events", body: good, ts: now, sig: "v0=zz", status: http.StatusUnauthorized},
		{name: "MissingHeaders", path: "/slack/events", body: good, noHeader: true, status: http.StatusUnauthorized,
			says: "missing the X-Slack-Signature and X-Slack-Request-Timestamp headers"},
		{name: "StaleTimestamp", path: "/slack/events", body: good, ts: now - 301, status: http.StatusUnauthorized},
		{name: "FutureTimestamp", path: "/slack/events", body: good, ts: now + 400, status: http.StatusUnauthorized},
		{name: "MalformedJSON", path: "/slack/events", body: []byte(`{"type":"event_callback",`), ts: now, status: http.StatusBadRequest},
		{name: "NoEventID", path: "/slack/events", body: []byte(`{"type":"event_callback","event":{}}`), ts: now, status: http.StatusBadRequest},
		{name: "EventNotAnObject", path: "/slack/events", body: []byte(`{"type":"event_callback","event_id":"Ev8","event":"hi"}`), ts: now, status: http.StatusBadRequest},
		{name: "NoType", path: "/slack/events", body: []byte(`{"event_id":"Ev9"}`), ts: now, status: http.StatusBadRequest},
		{name: "Oversize", path: "/slack/events", body: append(append([]byte(`{"type":"event_callback","event_id":"EvBig","event":{"text":"`), bytes.Repeat([]byte("a"), bridge.MaxBody)...), []byte(`"}}`)...), ts: now, status: http.StatusRequestEntityTooLarge},
		{name: "InteractionNotAForm", path: "/slack/interactions", body: []byte(`%zz`), ts: now, status: http.StatusBadRequest},
		{name: "InteractionNoPayload", path: "/slack/interactions", body: []byte(`a=b`), ts: now, status: http.StatusBadRequest},
		{name: "InteractionMalformed", path: "/slack/interactions", body: []byte(url.Values{"payload": {`{"type":`}}.Encode()), ts: now, status: http.StatusBadRequest},
		{name: "InteractionBadSignature", path: "/slack/interactions", body: []byte(url.Values{"payload": {`{"type":"block_actions","user":{"id":"U1"}}`}}.Encode()), ts: now, sig: "v0=" + strings.Repeat("00", 32), status: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.noHeader {
				resp, err := http.Post(tb.srv.URL+tt.path, "application/json", bytes.NewReader(tt.body))
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, tt.status, resp.StatusCode)
				require.Contains(t, string(body), tt.says)
				return
			}
			status, body := tb.postSigned(t, tt.path, "application/json", tt.body, tt.ts, tt.sig)
			require.Equal(t, tt.status, status, body)
		})
	}
	pending, err := tb.store.SlackInboxPending(tb.ctx, 10)
	require.NoError(t, err)
	require.Empty(t, pending, "refused requests store nothing")
	require.Empty(t, tb.slack.Calls(""), "and call nothing")
}

func TestURLVerification(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	status, body := tb.post(t, "/slack/events", "application/json",
		[]byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", body)
}

func TestMentionStartsThreadSessionAndReplies(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	ts := tb.ts()
	tb.event(t, "EvM1", mention("C1", "U1", ts, "", "hello there"))

	reply := tb.waitPost(t, "C1", ts, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Session commands") })
	require.Contains(t, text(reply), "No workflows are live", "the template model's chat reply")
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C1:"+ts)
	require.NoError(t, err)
	require.Equal(t, "hello there", ses.Title)

	// A later message in the thread, without a mention, joins the transcript
	// without a chat turn; one in an unknown thread is ignored.
	tb.event(t, "EvM2", message("C1", "U2", tb.ts(), ts, "a note for the record"))
	tb.event(t, "EvM3", message("C1", "U2", tb.ts(), "1600000000.000001", "elsewhere"))
	tb.event(t, "EvM4", message("C1", "U2", tb.ts(), "", "top level chatter"))
	tb.inboxDrained(t)
	ses, err = tb.store.SessionGetByID(tb.ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, int64(3), ses.EventCount, "user_message, assistant_message, then the thread note")
	evs, err := tb.store.SlackMirrorEvents(tb.ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, "user_message", evs[2].Type)
	require.Equal(t, "a note for the record", evs[2].Payload["text"])
	require.Equal(t, "slack:U2", evs[2].Actor)
	require.Len(t, tb.posts("C1", ts), 1, "no reply to a message without a mention")
}

func TestIgnoresBotsAndEmptyEdits(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	ts := tb.ts()
	tb.event(t, "EvB0", mention("C1", "U1", ts, "", "hello"))
	tb.waitPost(t, "C1", ts, func(fakeslack.Call) bool { return true })
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C1:"+ts)
	require.NoError(t, err)

	own := message("C1", fakeslack.BotUserID, tb.ts(), ts, "my own reply")
	own["bot_id"] = fakeslack.BotID
	other := message("C1", "U9", tb.ts(), ts, "another bot")
	other["bot_id"] = "BOTHER"
	edit := message("C1", "U1", tb.ts(), ts, "edited")
	edit["subtype"] = "message_changed"
	botMention := mention("C1", "U9", tb.ts(), ts, "help")
	botMention["bot_id"] = "BOTHER"
	for i, ev := range []map[string]any{own, other, edit, botMention} {
		tb.event(t, "EvB"+string(rune('1'+i)), ev)
	}
	tb.inboxDrained(t)
	got, err := tb.store.SessionGetByID(tb.ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, ses.EventCount, got.EventCount, "bots, and a message_changed that carries no message, add nothing")
	require.Len(t, tb.posts("C1", ts), 1)
}

func TestAllowBots(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = func(c *bridge.Config) { c.AllowBots = true }
	tb := setup(t, o)
	ts := tb.ts()
	m := mention("C1", "U9", ts, "", "help")
	m["bot_id"] = "BOTHER"
	tb.event(t, "EvA1", m)
	tb.waitPost(t, "C1", ts, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Holdfast") })
	own := mention("C1", fakeslack.BotUserID, tb.ts(), ts, "help")
	own["bot_id"] = fakeslack.BotID
	tb.event(t, "EvA2", own)
	ownPost := message("C1", "", tb.ts(), ts, "Holdfast says hi")
	ownPost["bot_id"], ownPost["subtype"] = fakeslack.BotID, "bot_message"
	tb.event(t, "EvA3", ownPost)
	tb.inboxDrained(t)
	require.Len(t, tb.posts("C1", ts), 1, "never its own messages")

	// Another bot's post in the thread joins the transcript.
	botPost := message("C1", "", tb.ts(), ts, "deploy finished")
	botPost["bot_id"], botPost["subtype"] = "BOTHER", "bot_message"
	tb.event(t, "EvA4", botPost)
	tb.inboxDrained(t)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C1:"+ts)
	require.NoError(t, err)
	evs, err := tb.sessions.Events(tb.ctx, ses.ID, time.Time{}, 100)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, "user_message", last.Type)
	require.Equal(t, "slack:BOTHER", last.Actor)
}

func TestEnqueueOnceAcrossRedeliveries(t *testing.T) {
	t.Parallel()
	o := standIns()
	eng := newRecordingEngine()
	o.engine = func(*testBundle) bridge.Engine { return eng }
	tb := setup(t, o)
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts")
	root := tb.ts()
	msgTS := tb.ts()
	ev := mention("C7", "U1", msgTS, root, "draft-memo Otters of the Pacific\nThey hold hands while sleeping.")
	for range 3 {
		tb.event(t, "EvQ1", ev) // Slack retries carry the same event_id
	}
	// The same message also arrives as a plain message event with another id.
	plain := message("C7", "U1", msgTS, root, ev["text"].(string))
	tb.event(t, "EvQ2", plain)
	tb.waitPost(t, "C7", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Queued") })
	tb.inboxDrained(t)

	enq, _ := eng.snapshot()
	require.Len(t, enq, 1)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C7:"+root)
	require.NoError(t, err)
	evs, err := tb.sessions.Events(tb.ctx, ses.ID, time.Time{}, 100)
	require.NoError(t, err)
	require.Len(t, evs, 1, "the request is in the transcript once")
	require.Equal(t, "user_message", evs[0].Type)
	require.Equal(t, true, evs[0].Payload["mention"])
	require.Equal(t, engine.EnqueueParams{
		Command: "/draft-memo", DedupeKey: "slack:C7:" + msgTS, SessionID: ses.ID, OwnerUID: "slack:U1",
		Payload: map[string]any{
			"brief":  "Otters of the Pacific\nThey hold hands while sleeping.",
			"source": map[string]any{"platform": "slack", "channel": "C7", "threadTs": root, "user": "U1"},
		},
	}, enq[0])

	// `run <command> <brief>` is the same; an unknown workflow is explained.
	tb.event(t, "EvQ3", mention("C7", "U1", tb.ts(), root, "run /draft-memo Herons"))
	tb.event(t, "EvQ4", mention("C7", "U1", tb.ts(), root, "run weekly-nope x"))
	tb.waitPost(t, "C7", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "no workflow `weekly-nope`") })
	enq, _ = eng.snapshot()
	require.Len(t, enq, 2)
	require.Equal(t, "Herons", enq[1].Payload["brief"])
	require.Len(t, tb.slack.Calls("chat.postMessage"), 3, "one reply per message, none for redeliveries")
}

// TestMessageDeliveredTwiceAnsweredOnce: Slack can deliver one message as
// two events with different event_ids (two app_mentions, or a DM twice);
// the thread sees one answer and the transcript one line, whichever the
// command, and a message delivered twice in a bound thread is recorded once.
func TestMessageDeliveredTwiceAnsweredOnce(t *testing.T) {
	t.Parallel()
	o := standIns()
	eng := newRecordingEngine()
	o.engine = func(*testBundle) bridge.Engine { return eng }
	tb := setup(t, o)
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts")

	chat := tb.ts()
	tb.event(t, "EvTw1", mention("CTW", "U1", chat, "", "hello there"))
	tb.event(t, "EvTw2", mention("CTW", "U1", chat, "", "hello there"))
	// The chat turn answers in the background: its answer is in the
	// transcript before the next message only once it is posted.
	tb.eventually(t, func() bool { return len(tb.posts("CTW", chat)) >= 1 }, 10*time.Second, "the chat reply arrives")
	help, enq := tb.ts(), tb.ts()
	tb.event(t, "EvTw3", mention("CTW", "U1", help, chat, "help"))
	tb.event(t, "EvTw4", mention("CTW", "U1", enq, chat, "draft-memo Otters"))
	note := tb.ts()
	tb.event(t, "EvTw5", message("CTW", "U2", note, chat, "a note for the record"))
	tb.quiet(t)
	// The second deliveries come after the first are answered, too.
	tb.event(t, "EvTw6", mention("CTW", "U1", help, chat, "help"))
	tb.event(t, "EvTw7", mention("CTW", "U1", enq, chat, "draft-memo Otters"))
	tb.event(t, "EvTw8", message("CTW", "U2", note, chat, "a note for the record"))
	dm := tb.ts()
	tb.event(t, "EvTw9", dmMessage("DTW", "U1", dm, "hello in private"))
	tb.event(t, "EvTw10", dmMessage("DTW", "U1", dm, "hello in private"))
	// A chat turn answers after its delivery is handled, which quiet does
	// not see: wait for the answers themselves first.
	tb.eventually(t, func() bool { return len(tb.posts("CTW", chat)) >= 3 && len(tb.posts("DTW", "")) >= 1 },
		10*time.Second, "the answers arrive")
	tb.quiet(t)

	var said []string
	for _, c := range tb.posts("CTW", chat) {
		said = append(said, firstLine(c.Form["text"]))
	}
	require.Len(t, said, 3, "one chat reply, one help, one queued line: %q", said)
	require.Len(t, tb.posts("DTW", ""), 1, "one answer to the DM")
	enqs, _ := eng.snapshot()
	require.Len(t, enqs, 1)
	require.Equal(t, []string{"user_message", "assistant_message", "user_message", "assistant_message", "user_message", "user_message"},
		tb.eventTypes(t, tb.threadSession(t, "CTW", chat).ID), "each message is in the transcript once")
}

func dmMessage(channel, user, ts, text string) map[string]any {
	m := message(channel, user, ts, "", text)
	m["channel_type"] = "im"
	return m
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func TestInboxRetriesFailedDelivery(t *testing.T) {
	t.Parallel()
	o := standIns()
	eng := newRecordingEngine()
	eng.failEnqueue = 2
	o.engine = func(*testBundle) bridge.Engine { return eng }
	o.cfg = func(c *bridge.Config) { c.Tick = 20 * time.Millisecond }
	tb := setup(t, o)
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts")
	root := tb.ts()
	tb.event(t, "EvF1", mention("CF", "U1", root, "", "draft-memo Tide pools"))
	tb.waitPost(t, "CF", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Queued") })
	tb.inboxDrained(t)
	enq, _ := eng.snapshot()
	require.Len(t, enq, 1, "enqueued on the third attempt, once")

	// A delivery that keeps failing is set aside with its error.
	eng.mu.Lock()
	eng.failEnqueue = 100
	eng.mu.Unlock()
	tb.event(t, "EvF2", mention("CF", "U1", tb.ts(), root, "draft-memo Never"))
	tb.inboxDrained(t)
	require.Len(t, tb.posts("CF", root), 1)
}

func TestSlowThreadHoldsUpOnlyItself(t *testing.T) {
	t.Parallel()
	o := standIns()
	eng := newRecordingEngine()
	eng.gate = make(chan struct{})
	o.engine = func(*testBundle) bridge.Engine { return eng }
	tb := setup(t, o)
	var once sync.Once
	release := func() { once.Do(func() { close(eng.gate) }) }
	t.Cleanup(release) // before the bridge stops, even when the test fails
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts")
	slow, fast := tb.ts(), tb.ts()
	tb.event(t, "EvW1", mention("CW", "U1", slow, "", "draft-memo a slow one"))
	tb.event(t, "EvW2", mention("CW", "U1", fast, "", "help"))
	tb.waitPost(t, "CW", fast, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Holdfast") })
	require.Empty(t, tb.posts("CW", slow), "still waiting on its engine call")
	later := tb.ts()
	tb.event(t, "EvW3", mention("CW", "U2", later, slow, "help"))
	tb.event(t, "EvW4", mention("CW", "U2", tb.ts(), "", "help"))
	tb.inboxPendingIs(t, 2) // the slow one and the message behind it in its thread
	release()
	tb.waitPost(t, "CW", slow, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Holdfast") })
	posts := tb.posts("CW", slow)
	require.Contains(t, posts[0].Form["text"], "Queued", "the thread kept its order")
}

func TestMentionCommands(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts a memo <fast>")
	tb.addWorkflow(t, "/paused-one", "paused", "hidden")
	root := tb.ts()
	tests := []struct{ text, want string }{
		{"help", "policy manual|auto|yolo"},
		{"", "Holdfast"},
		{"workflows", "• `draft-memo` — Drafts a memo &lt;fast&gt;"},
		{"status", "*Status:* `idle` · *policy* `auto`"},
		{"TERMINATE", "Terminated: nothing was running in this session."},
		{"compact", "Compacted."},
		{"policy yolo", "only a steward may change the posture from auto to yolo"},
		{"policy manual", "Policy for this thread is now `manual`."},
		{"policy sideways", "Usage: `policy manual|auto|yolo`"},
	}
	for i, tt := range tests {
		ts := tb.ts()
		tb.event(t, "EvC"+string(rune('a'+i)), mention("C2", "U1", ts, root, tt.text))
		c := tb.waitPost(t, "C2", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], tt.want) })
		if tt.text == "workflows" {
			require.NotContains(t, c.Form["text"], "paused-one")
		}
	}
	// Posts arrive in the order the mentions came.
	posts := tb.posts("C2", root)
	require.Len(t, posts, len(tests))
	for i, tt := range tests {
		require.Contains(t, posts[i].Form["text"], tt.want)
	}
}

func TestButtonsAndThreadDecisions(t *testing.T) {
	t.Parallel()
	o := standIns()
	eng := newRecordingEngine()
	eng.stewards["USTEWARD"] = true
	o.engine = func(*testBundle) bridge.Engine { return eng }
	tb := setup(t, o)
	root := tb.ts()
	tb.event(t, "EvD0", mention("C3", "U1", root, "", "hello"))
	tb.inboxDrained(t)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C3:"+root)
	require.NoError(t, err)

	require.Equal(t, http.StatusOK, tb.click(t, "UNOBODY", "hold_approve", "hld_1", "C3", "1.5", root))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 1 }, 5*time.Second)
	eph := tb.slack.Delivered("chat.postEphemeral")[0]
	require.Equal(t, "UNOBODY", eph.Form["user"])
	require.Equal(t, root, eph.Form["thread_ts"])
	require.Contains(t, eph.Form["text"], "can't approve this hold")
	require.Contains(t, eph.Form["text"], "http://holdfast.test/holds/hld_1")

	require.Equal(t, http.StatusOK, tb.click(t, "USTEWARD", "hold_reject", "hld_1", "C3", "1.5", root))
	tb.eventually(t, func() bool { _, d := eng.snapshot(); return len(d) == 2 }, 5*time.Second)

	// @bot approve with no open hold, then with one.
	tb.event(t, "EvD1", mention("C3", "USTEWARD", tb.ts(), root, "approve"))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 2 }, 5*time.Second)
	require.Contains(t, tb.slack.Delivered("chat.postEphemeral")[1].Form["text"], "no open hold")
	holdID := tb.openHold(t, ses.ID)
	tb.event(t, "EvD2", mention("C3", "USTEWARD", tb.ts(), root, "approve looks great &amp; ship it"))
	tb.eventually(t, func() bool { _, d := eng.snapshot(); return len(d) == 3 }, 5*time.Second)
	_, d := eng.snapshot()
	steward := engine.Decider{SlackUserID: "USTEWARD", Via: "slack"}
	require.Equal(t, engine.DecideParams{HoldID: holdID, Decision: "approve", Comment: "looks great & ship it", Decider: steward}, d[2])
	require.Equal(t, engine.DecideParams{HoldID: "hld_1", Decision: "reject", Decider: steward}, d[1])
}

func TestInboxReplayedAtStart(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.noStart = true
	tb := setup(t, o)
	ts := tb.ts()
	tb.event(t, "EvR1", mention("C4", "U1", ts, "", "help"))
	tb.event(t, "EvR1", mention("C4", "U1", ts, "", "help"))
	pending, err := tb.store.SlackInboxPending(tb.ctx, 10)
	require.NoError(t, err)
	require.Len(t, pending, 1, "stored once, before the ack, and not processed yet")

	// A fresh bridge on the same store (the process after a crash) replays it.
	b2 := bridge.New(bridge.Config{SigningSecret: secret, Tick: 50 * time.Millisecond}, tb.store, apiFor(tb), newRecordingEngine(), tb.sessions, discard())
	runBridge(t, tb, b2)
	tb.waitPost(t, "C4", ts, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Holdfast") })
	tb.inboxDrained(t)
}

func TestEnvelopeJSON(t *testing.T) {
	t.Parallel()
	env, err := bridge.ParseEnvelope(eventBody("Ev1", message("C1", "U1", "1.1", "", "x")))
	require.NoError(t, err)
	m := env.Event
	require.Equal(t, "1.1", m.Root())
	b, _ := json.Marshal(m)
	require.Contains(t, string(b), `"channel":"C1"`)
}

// TestDirectMessages: a DM needs no mention; its top-level messages are one
// conversation (session slack:<channel>:dm, SPEC §3), answered at top level,
// in order; a reply inside a thread of the DM is that thread's session.
func TestDirectMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	dm := func(ts, threadTS, text string) map[string]any {
		m := message("D1", "U1", ts, threadTS, text)
		m["channel_type"] = "im"
		return m
	}
	first := tb.ts()
	tb.event(t, "EvDM1", dm(first, "", "hello from a DM"))
	helped := tb.waitPost(t, "D1", "", func(c fakeslack.Call) bool { return strings.Contains(text(c), "Session commands") })
	// Slack would take "/status" as its own slash command and never send it.
	require.Contains(t, text(helped), "Session commands: status, terminate, compact.")
	require.NotContains(t, text(helped), "/status")
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:D1:dm")
	require.NoError(t, err)
	require.Equal(t, "slack", ses.Platform)

	tb.event(t, "EvDM2", dm(tb.ts(), "", "help"))
	dmHelp := tb.waitPost(t, "D1", "", func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "policy manual|auto|yolo") })
	require.Contains(t, dmHelp.Form["text"], "send me", "help in a DM needs no mention, and says so")
	require.NotContains(t, dmHelp.Form["text"], "mention me")
	again, err := tb.store.SessionGetByTag(tb.ctx, "slack:D1:dm")
	require.NoError(t, err)
	require.Equal(t, ses.ID, again.ID, "the second message continues the DM's one session")
	_, err = tb.store.SessionGetByTag(tb.ctx, "slack:D1:"+first)
	require.ErrorIs(t, err, store.ErrNotFound, "no session per message")

	tb.event(t, "EvDM3", dm(tb.ts(), first, "status"))
	tb.waitPost(t, "D1", first, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Status:*") })
	inThread, err := tb.store.SessionGetByTag(tb.ctx, "slack:D1:"+first)
	require.NoError(t, err)
	require.NotEqual(t, ses.ID, inThread.ID, "a thread of the DM is a session of its own")
	tb.quiet(t)
	require.Len(t, tb.posts("D1", ""), 2, "both top-level messages answered at top level")
	said := 0
	for _, typ := range tb.eventTypes(t, ses.ID) {
		if typ == "user_message" {
			said++
		}
	}
	require.Equal(t, 2, said, "the DM's session holds both top-level messages")
}

// crashingEngine stands for a process that dies inside the enqueue: the call
// never returns until the bridge's context ends.
type crashingEngine struct {
	bridge.Engine
	entered chan struct{}
}

func (e crashingEngine) Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error) {
	select {
	case e.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, false, ctx.Err()
}

// TestMentionReplayRecordsOnce: a process that recorded a mention command in
// the transcript and died before marking its delivery processed leaves the
// delivery to be replayed; the replay runs the command, and the transcript
// shows the request once.
func TestMentionReplayRecordsOnce(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.noStart = true
	tb := setup(t, o)
	tb.addWorkflow(t, "/draft-memo", "live", "Drafts")
	root := tb.ts()
	tb.event(t, "EvX1", mention("CX", "U1", root, "", "draft-memo Salt marshes"))

	crash := crashingEngine{Engine: newRecordingEngine(), entered: make(chan struct{}, 1)}
	cfg := bridge.Config{SigningSecret: secret, Tick: 50 * time.Millisecond, InboxRetry: 10 * time.Millisecond}
	b1 := bridge.New(cfg, tb.store, apiFor(tb), crash, tb.sessions, discard())
	ctx1, crash1 := context.WithCancel(tb.ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = b1.Start(ctx1) }()
	select {
	case <-crash.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first process never reached the enqueue")
	}
	crash1()
	<-stopped
	tb.inboxPendingIs(t, 1)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:CX:"+root)
	require.NoError(t, err)
	requests := func() int {
		evs, err := tb.sessions.Events(tb.ctx, ses.ID, time.Time{}, 100)
		require.NoError(t, err)
		n := 0
		for _, ev := range evs {
			if ev.Type == "user_message" && ev.Payload["text"] == "draft-memo Salt marshes" {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, requests(), "recorded before the crash")

	// The next process replays the delivery: the item is queued and
	// acknowledged, and the request is still in the transcript once.
	eng := newRecordingEngine()
	runBridge(t, tb, bridge.New(cfg, tb.store, apiFor(tb), eng, tb.sessions, discard()))
	tb.waitPost(t, "CX", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Queued `draft-memo`") })
	tb.inboxDrained(t)
	enq, _ := eng.snapshot()
	require.Len(t, enq, 1)
	require.Equal(t, 1, requests())
	require.Len(t, tb.posts("CX", root), 1)
}

// TestMidSentenceMention: the bot named inside a sentence leaves no gap in
// what is recorded, and another person named stays named.
func TestMidSentenceMention(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	root := tb.ts()
	m := mention("CM", "U1", root, "", "")
	m["text"] = "hey <@" + fakeslack.BotUserID + ">   can you help <@U2> today"
	tb.event(t, "EvMid1", m)
	tb.inboxDrained(t)
	evs, err := tb.sessions.Events(tb.ctx, tb.threadSession(t, "CM", root).ID, time.Time{}, 10)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.Equal(t, "user_message", evs[0].Type)
	require.Equal(t, "hey can you help @U2 today", evs[0].Payload["text"])
}
