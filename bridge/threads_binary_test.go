package bridge_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// TestThreadsThroughTheBinary is issue 11's Slack acceptance, with the
// real cmd/bot binary in HTTP mode against the fake Slack:
//   - a thread of four messages by two people: the summarize-thread reply
//     holds all four, attributed;
//   - a late mention in a thread whose earlier messages only the fake's
//     conversations.replies knows: backfilled events, oldest first, and
//     the summary includes them;
//   - conversations.replies answering 429 with Retry-After: honoured, and
//     the mention is still answered within 2 s.
func TestThreadsThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	t.Parallel()
	bin := bottest.Binary(t)

	fake := fakeslack.New(t)
	fake.SetUser("U1", "ada", "Ada", "Ada Lovelace")
	fake.SetUser("U2", "bob", "Bob", "Bob Babbage")
	data := testdb.New(t)
	p := bottest.Start(t, bin, append(os.Environ(), "HOLDFAST_DB="+data.DSN(), "HOLDFAST_ADMIN_PASSWORD=threads-test-pw",
		"SLACK_BOT_TOKEN=xoxb-test", "SLACK_SIGNING_SECRET="+secret, "SLACK_API_URL="+fake.APIURL(), "SLACK_APP_TOKEN="))
	t.Cleanup(func() {
		if t.Failed() {
			log := p.Log()
			t.Logf("serve's log:\n%s", log[max(0, len(log)-8000):])
		}
	})
	s := data.Open(t) // the test reads beside the process

	var seq int
	ts := func() string {
		seq++
		return fmt.Sprintf("%d.%06d", time.Now().Unix(), seq)
	}
	deliver := func(inner map[string]any) time.Time {
		t.Helper()
		seq++
		body := eventBody(fmt.Sprint("EvBin", seq), inner)
		req, err := http.NewRequest(http.MethodPost, p.URL+"/slack/events", bytes.NewReader(body))
		require.NoError(t, err)
		now := time.Now()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("X-Slack-Signature", sign(now.Unix(), body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return now
	}
	summaries := func(channel, root string) []fakeslack.Call {
		var out []fakeslack.Call
		for _, c := range fake.Delivered("chat.postMessage") {
			if c.Form["channel"] == channel && c.Form["thread_ts"] == root && strings.Contains(text(c), "Summary of this thread") {
				out = append(out, c)
			}
		}
		return out
	}
	waitSummary := func(channel, root string, n int) fakeslack.Call {
		t.Helper()
		waitSlack(t, fake, func() bool { return len(summaries(channel, root)) >= n }, 20*time.Second,
			"summary %d in %s/%s", n, channel, root)
		return summaries(channel, root)[n-1]
	}
	transcript := func(channel, root string) []*store.Event {
		t.Helper()
		evs, err := threadEvents(s, channel, root)
		require.NoError(t, err)
		return evs
	}
	seed := func(channel string) string {
		root := ts()
		fake.Seed(fakeslack.Message{Channel: channel, TS: root, User: "U1", Text: "Launch on Monday?"})
		fake.Seed(fakeslack.Message{Channel: channel, TS: ts(), ThreadTS: root, User: "U2", Text: "The release notes are not done"})
		fake.Seed(fakeslack.Message{Channel: channel, TS: ts(), ThreadTS: root, User: fakeslack.BotUserID, BotID: fakeslack.BotID, Text: "Noted earlier"})
		fake.Seed(fakeslack.Message{Channel: channel, TS: ts(), ThreadTS: root, User: "U1", Text: "Tuesday then"})
		return root
	}

	t.Run("ThreadOfFourByTwo", func(t *testing.T) {
		root := ts()
		deliver(mention("C4", "U1", root, "", "we need a launch date"))
		deliver(message("C4", "U2", ts(), root, "Monday is too soon"))
		deliver(message("C4", "U1", ts(), root, "Tuesday then?"))
		deliver(message("C4", "U2", ts(), root, "Tuesday works for support"))
		deliver(mention("C4", "U2", ts(), root, "summarize-thread"))
		requireInOrder(t, text(waitSummary("C4", root, 1)), "*Ada*: we need a launch date", "*Bob*: Monday is too soon",
			"*Ada*: Tuesday then?", "*Bob*: Tuesday works for support")
	})

	t.Run("LateMentionBackfills", func(t *testing.T) {
		root := seed("CB")
		deliver(mention("CB", "U2", ts(), root, "summarize-thread"))
		requireInOrder(t, text(waitSummary("CB", root, 1)), "*Ada*: Launch on Monday?", "*Bob*: The release notes are not done",
			"*Holdfast*: Noted earlier", "*Ada*: Tuesday then", "*Bob*: summarize-thread")
		require.Equal(t, []said{
			{store.EventUserMessage, "Ada", "Launch on Monday?"},
			{store.EventUserMessage, "Bob", "The release notes are not done"},
			{store.EventAssistantMessage, "Holdfast", "Noted earlier"},
			{store.EventUserMessage, "Ada", "Tuesday then"},
		}, backfilled(transcript("CB", root)), "backfilled, oldest first")
	})

	t.Run("RateLimitedAnsweredWithin2s", func(t *testing.T) {
		root := seed("CQ")
		before := len(fake.Calls("conversations.replies"))
		fake.FailMethod("conversations.replies", 1, http.StatusTooManyRequests, 1)
		start := deliver(mention("CQ", "U1", ts(), root, "summarize-thread"))
		first := waitSummary("CQ", root, 1)
		t.Logf("rate limited: the mention is answered %v after its delivery", first.At.Sub(start))
		require.Less(t, first.At.Sub(start), 2*time.Second, "the mention is answered within 2 s")
		require.Eventually(t, func() bool { return backfilledCount(s, "CQ", root) == 4 }, 20*time.Second, 10*time.Millisecond)
		calls := fake.Calls("conversations.replies")[before:]
		require.Len(t, calls, 2)
		require.Equal(t, http.StatusTooManyRequests, calls[0].Status)
		require.GreaterOrEqual(t, calls[1].At.Sub(calls[0].At), time.Second, "Retry-After is honoured")
		deliver(mention("CQ", "U2", ts(), root, "summarize-thread"))
		requireInOrder(t, text(waitSummary("CQ", root, 2)), "*Ada*: Launch on Monday?", "*Holdfast*: Noted earlier", "*Ada*: Tuesday then",
			"*Ada*: summarize-thread", "*Bob*: summarize-thread")
	})

	p.Stop(t)
}
