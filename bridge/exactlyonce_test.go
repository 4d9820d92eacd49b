package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// TestOutboxFindsPostsWhoseAnswerWasLost is SPEC §5's exactly-once rule
// inside one test process: a bridge stops while Slack holds the answers to
// two posts (a thread reply and a top-level card), so both are in Slack but
// recorded only as attempted. The next bridge finds them by their metadata,
// in the thread (conversations.replies) and in the channel's history
// (conversations.history), records the ts Slack gave them and posts neither
// again; a message never attempted is posted without a search.
func TestOutboxFindsPostsWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.noStart = true
	tb := setup(t, o)
	tb.slack.AddMessage("C1", "1700000200.000001", "", "U1", "a thread's root")
	tb.slack.SlowPosts(time.Hour) // answered only when the caller gives up
	add := func(key, channel, thread string) {
		_, err := tb.store.SlackOutboxAdd(tb.ctx, []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: channel + ":" + thread,
			Method: store.SlackPost, Channel: channel, ThreadTS: thread, Text: "text of " + key}})
		require.NoError(t, err)
	}
	add("reply", "C1", "1700000200.000001")
	add("card", "CHOLDS", "")

	// The first bridge's claims of the posts it was cut off in lapse after
	// ClaimLease; the second takes them over then.
	cfg := bridge.Config{Tick: 20 * time.Millisecond, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		ClaimLease: 300 * time.Millisecond}
	first := bridge.New(cfg, tb.store, apiFor(tb), newRecordingEngine(), tb.sessions, discard())
	ctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = first.Start(ctx) }()
	tb.eventually(t, func() bool { return tb.slack.InFlight() == 2 }, 10*time.Second)
	cancel() // the process goes while both answers are on the wire
	<-done
	for _, key := range []string{"reply", "card"} {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxPending, m.Status, key)
		require.NotNil(t, m.AttemptedAt, "%s: the attempt was on record before the post", key)
	}
	posted := map[string]fakeslack.Message{}
	for _, m := range tb.slack.Messages("") {
		if m.BotID == fakeslack.BotID {
			posted[m.Text] = m
		}
	}
	require.Len(t, posted, 2, "both posts are in Slack")

	tb.slack.SlowPosts(0)
	add("fresh", "C1", "1700000200.000001") // queued behind the reply
	second := bridge.New(cfg, tb.store, apiFor(tb), newRecordingEngine(), tb.sessions, discard())
	runBridge(t, tb, second)
	tb.idle(t)
	for _, key := range []string{"reply", "card", "fresh"} {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxSentSt, m.Status, key)
		if key == "fresh" {
			continue
		}
		require.Equal(t, posted["text of "+key].TS, m.SentTS, "%s is recorded with the ts Slack gave it", key)
		require.Equal(t, map[string]any{"event_type": "holdfast_outbox", "event_payload": map[string]any{"id": fmt.Sprint(m.ID),
			"at": fmt.Sprint(m.CreatedAt.UnixMicro())}}, posted["text of "+key].Metadata, key)
	}
	bot := 0
	for _, m := range tb.slack.Messages("") {
		if m.BotID == fakeslack.BotID {
			bot++
		}
	}
	require.Equal(t, 3, bot, "nothing was posted twice")

	for method, want := range map[string]string{"conversations.replies": "C1", "conversations.history": "CHOLDS"} {
		calls := tb.slack.Calls(method)
		require.Len(t, calls, 1, "%s: one search, for the attempted message only", method)
		require.Equal(t, want, calls[0].Form["channel"])
		require.Equal(t, "1", calls[0].Form["include_all_metadata"], "without it Slack leaves metadata out")
		require.NotEmpty(t, calls[0].Form["oldest"], "bounded by the first attempt")
	}
}

// TestOutboxPostsWhatASearchDoesNotFind: a post whose attempt failed before
// Slack took it (an outage answer) is searched for on its retry, not found,
// and posted once.
func TestOutboxPostsWhatASearchDoesNotFind(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	tb.slack.FailNext(2, http.StatusBadGateway, 0)
	require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k", Queue: "C2:1.1", Method: store.SlackPost,
		Channel: "C2", ThreadTS: "1.1", Text: "after the outage"}))
	tb.waitPost(t, "C2", "1.1", func(c fakeslack.Call) bool { return c.Form["text"] == "after the outage" })
	tb.idle(t)
	require.Len(t, tb.posts("C2", "1.1"), 1)
	require.Len(t, tb.slack.Calls("chat.postMessage"), 3, "two failed attempts, then the post")
	require.Len(t, tb.slack.Calls("conversations.replies"), 2, "each retry looks first")
}

// TestOutboxMatchesOnlyItsOwnMark: after an attempt whose answer was lost,
// a post of the same bot carrying the same outbox id is taken for it only
// when it was queued at the same microsecond too. One written from another
// database (a second deployment sharing the bot, or this one before a
// restore from backup) is not, and the message is posted; one marked by id
// alone (as binaries before the "at" mark wrote it) still is, so an upgrade
// in the middle of a lost answer posts nothing twice.
func TestOutboxMatchesOnlyItsOwnMark(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mark  map[string]any
		posts int // 1: posted; 0: taken for the earlier attempt
	}{
		{"AnotherDatabase", map[string]any{"id": "1", "at": "1600000000000000"}, 1},
		{"AnOlderBinary", map[string]any{"id": "1"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, standIns())
			const root = "1700000300.000001"
			tb.slack.AddMessage("C3", root, "", "U1", "a thread's root")
			// Posted a moment ago: the search reads back from the first attempt.
			tb.slack.Seed(fakeslack.Message{Channel: "C3", TS: fmt.Sprintf("%d.000002", time.Now().Unix()), ThreadTS: root,
				User: fakeslack.BotUserID, BotID: fakeslack.BotID, Text: "marked " + tc.name,
				Metadata: map[string]any{"event_type": "holdfast_outbox", "event_payload": tc.mark}})
			tb.slack.FailNext(1, http.StatusBadGateway, 0) // the first attempt, so the retry looks first
			require.NoError(t, tb.addOutbox(&store.SlackOutboxAddParams{DedupeKey: "k", Queue: "C3:" + root, Method: store.SlackPost,
				Channel: "C3", ThreadTS: root, Text: "this database's message"}))
			tb.eventually(t, func() bool {
				m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "k")
				return err == nil && m.Status == store.SlackOutboxSentSt
			}, 10*time.Second)
			tb.idle(t)
			m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "k")
			require.NoError(t, err)
			require.Equal(t, int64(1), m.ID, "the id the other post carries")
			require.Len(t, tb.slack.Calls("conversations.replies"), 1, "the retry looked first")
			require.Len(t, tb.slack.Delivered("chat.postMessage"), tc.posts)
		})
	}
}
