package bridge_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// productionTick is the bridge's default safety-net tick: with it, only a
// wake-up can hand a reply to the outbox within SPEC §5's 50 ms.
func productionTick(c *bridge.Config) { c.Tick = 5 * time.Second }

// replyLatency waits for the chat reply after event afterID in session id
// and answers how long after it was recorded it was queued for Slack (the
// outbox row's creation time minus the transcript event's).
func (tb *testBundle) replyLatency(t testing.TB, sessionID string, afterID int64) time.Duration {
	t.Helper()
	var reply *store.Event
	require.Eventually(t, func() bool {
		evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: sessionID, Types: []string{store.EventAssistantMessage},
			Newest: true, Limit: 1})
		if err != nil || len(evs) == 0 || evs[0].ID <= afterID {
			return false
		}
		reply = evs[0]
		return true
	}, 10*time.Second, time.Millisecond, "the chat turn answers")
	var queued *store.SlackOutboxMsg
	require.Eventually(t, func() bool {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, fmt.Sprintf("ev:%d:0", reply.ID))
		queued = m
		return err == nil
	}, 10*time.Second, time.Millisecond, "the reply is queued for its thread")
	return queued.CreatedAt.Sub(reply.TS)
}

// median is the middle value, or the mean of the two middle ones.
func median[T time.Duration | float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// TestChatReplyReachesOutboxAtOnce is SPEC §5's mirror latency for chat
// replies: a turn's answer in a Slack-bound session is handed to the outbox
// within 50 ms of being recorded, whether the message came from Slack or
// from the console, with the bridge's production tick (5 s) as the only
// other way to notice it.
func TestChatReplyReachesOutboxAtOnce(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = productionTick
	tb := setup(t, o)

	var lats []time.Duration
	for i := range 8 {
		root := tb.ts()
		tb.event(t, fmt.Sprint("EvChat", i), mention("C7", "U1", root, "", fmt.Sprint("hello there, number ", i)))
		var ses *store.Session
		require.Eventually(t, func() bool {
			var err error
			ses, err = tb.store.SessionGetByTag(tb.ctx, "slack:C7:"+root)
			return err == nil
		}, 10*time.Second, time.Millisecond)
		lat := tb.replyLatency(t, ses.ID, 0)
		require.Less(t, lat, time.Second, "reply %d from Slack waited for a tick", i)
		lats = append(lats, lat)
	}

	// A message typed in the console into the thread's session: no Slack
	// delivery (and no inbox worker) is involved at all.
	root := tb.ts()
	tb.event(t, "EvChatConsole", mention("C7", "U1", root, "", "status"))
	tb.inboxDrained(t)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:C7:"+root)
	require.NoError(t, err)
	for i := range 8 {
		ev := tb.consoleMessage(t, ses.ID, fmt.Sprint("from the console, number ", i))
		lat := tb.replyLatency(t, ses.ID, ev)
		require.Less(t, lat, time.Second, "reply %d to the console waited for a tick", i)
		lats = append(lats, lat)
	}
	t.Logf("chat reply → outbox: median %v, max %v over %d replies", median(lats), slices.Max(lats), len(lats))
	require.Less(t, median(lats), 50*time.Millisecond)
}

// consoleMessage sends text to the session as a console user would and
// answers the id of the newest event before it (so the reply comes after).
func (tb *testBundle) consoleMessage(t testing.TB, sessionID, text string) int64 {
	t.Helper()
	var last int64
	var sendErr error
	ada := engine.Decider{UserID: "ada", Username: "ada", Role: store.RoleSteward, Via: "console"}
	require.Eventually(t, func() bool {
		evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: sessionID, Newest: true, Limit: 1})
		if err != nil {
			return false
		}
		if len(evs) > 0 {
			last = evs[0].ID
		}
		_, sendErr = tb.sessions.Message(tb.ctx, sessionID, text, ada, true)
		return !errors.Is(sendErr, store.ErrConflict) // else the previous turn is still settling
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, sendErr)
	return last
}

// BenchmarkChatReplyToOutbox measures SPEC §5's mirror latency for chat
// replies on a Slack-bound session: from the reply's transcript event to its
// outbox row (p50, p99), with the production tick.
func BenchmarkChatReplyToOutbox(b *testing.B) {
	o := standIns()
	o.cfg = productionTick
	tb := setup(b, o)
	ses, err := tb.sessions.ResolveTag(tb.ctx, "slack:C8:1700000001.000001",
		sessions.CreateParams{Title: "bench", Source: sessions.Source{Via: sessions.ViaSlack, UserID: "slack:U1"}})
	require.NoError(b, err)
	lats := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		ev := tb.consoleMessage(b, ses.ID, fmt.Sprint("benchmark message ", i))
		lats = append(lats, tb.replyLatency(b, ses.ID, ev))
	}
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
}

// TestMirrorFollowsSlackThreadsThroughOtherWrites: the mirror wakes for
// every transcript write, most of them in sessions with no Slack thread; a
// burst of those (more than a mirror page) neither hides nor repeats the
// Slack thread's reply that follows it.
func TestMirrorFollowsSlackThreadsThroughOtherWrites(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = productionTick
	tb := setup(t, o)
	other, err := tb.store.SessionCreate(tb.ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
	require.NoError(t, err)
	for i := range 250 {
		_, err := tb.store.EventAppend(tb.ctx, &store.EventAppendParams{SessionID: other.ID, Type: store.EventAssistantMessage,
			Actor: "holdfast", Payload: map[string]any{"text": fmt.Sprint("console only ", i)}})
		require.NoError(t, err)
	}
	root := tb.ts()
	tb.event(t, "EvAfterBurst", mention("C9", "U1", root, "", "hello after the burst"))
	reply := tb.waitPost(t, "C9", root, func(c fakeslack.Call) bool { return c.Form["blocks"] != "" })
	require.NotContains(t, text(reply), "console only")
	tb.idle(t)
	require.Len(t, tb.posts("C9", root), 1, "the reply is posted once")
}
