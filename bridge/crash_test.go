package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// TestKill9PostsNoSlackMessageTwice is SPEC §5's exactly-once rule (and
// §8's) with the real binary: runs from Slack threads post their queued
// line, their started line and their hold card into the thread and into the
// holds channel (top-level messages there), while Slack answers each
// chat.postMessage slowly and the process is killed with SIGKILL again and
// again, mostly while posts are in flight. In the end every message is in
// Slack, once: no two posts carry the same outbox id, and no thread shows
// the same message twice.
func TestKill9PostsNoSlackMessageTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	testdb.SQLiteOnly(t)
	t.Parallel()
	dir := t.TempDir()
	bin := bottest.Binary(t)

	fake := fakeslack.New(t)
	const postDelay = 40 * time.Millisecond
	fake.SlowPosts(postDelay)
	db := filepath.Join(dir, "holdfast.db")
	env := append(os.Environ(), "HOLDFAST_DB="+db, "HOLDFAST_ADMIN_PASSWORD=crash-test-pw", "HOLDFAST_STUCK_RUN=1s",
		"HOLDFAST_PASS_INTERVAL=1s", "HOLDFAST_SLACK_CLAIM_LEASE=1s", "SLACK_BOT_TOKEN=xoxb-test", "SLACK_SIGNING_SECRET="+secret,
		"SLACK_API_URL="+fake.APIURL(), "SLACK_HOLDS_CHANNEL=CHOLDS", "SLACK_APP_TOKEN=") // HTTP mode

	p := bottest.Start(t, bin, env)
	t.Cleanup(func() {
		if t.Failed() {
			log := p.Log()
			t.Logf("the last serve's log:\n%s", log[max(0, len(log)-8000):])
		}
	})
	const threads = 30
	roots := make([]string, threads)
	for i := range threads {
		roots[i] = fmt.Sprintf("1700000100.%06d", i+1)
		body := eventBody(fmt.Sprint("EvKill", i), mention("C1", "U1", roots[i], "", fmt.Sprintf("draft-memo Otters, part %d", i)))
		req, err := http.NewRequest(http.MethodPost, p.URL+"/slack/events", bytes.NewReader(body))
		require.NoError(t, err)
		ts := time.Now().Unix()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("X-Slack-Signature", sign(ts, body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "the mention is stored before the ack")
	}

	// Each thread gets its queued line, its started line and its hold
	// card; the holds channel gets every card at top level.
	complete := func() bool {
		perThread, seen := map[string]int{}, map[string]bool{}
		for _, m := range fake.Messages("") {
			if k := m.Channel + ":" + m.ThreadTS + ":" + m.Text + string(m.Blocks); m.BotID == fakeslack.BotID && !seen[k] {
				seen[k] = true
				perThread[m.Channel+":"+m.ThreadTS]++
			}
		}
		if perThread["CHOLDS:"] < threads {
			return false
		}
		for _, r := range roots {
			if perThread["C1:"+r] < 3 {
				return false
			}
		}
		return true
	}
	const cycles = 12
	kills, midPost := 0, 0
	for kills < cycles {
		// Let a few posts complete (0 to 3, so kills fall at varied
		// points), then kill while one is on the wire.
		base := len(fake.Delivered("chat.postMessage")) - fake.InFlight()
		want := rand.IntN(4)
		waitSlack(t, fake, func() bool {
			done := len(fake.Delivered("chat.postMessage")) - fake.InFlight()
			return complete() || done-base >= want && fake.InFlight() > 0
		}, 30*time.Second, "posting goes on after restart %d", kills)
		require.False(t, complete(), "the work outlasts the kill loop (cycle %d)", kills)
		if fake.InFlight() > 0 {
			midPost++
		}
		p.Kill(t)
		kills++
		p = bottest.Start(t, bin, env)
	}
	waitSlack(t, fake, complete, 30*time.Second, "every message reaches Slack")

	// The last answers arrive and are recorded: nothing is left to send.
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: db}) // WAL: a second process may read and write too
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool {
		_, err := s.SlackOutboxNextDue(ctx)
		return errors.Is(err, store.ErrNotFound)
	}, 30*time.Second, externalPoll, "the outbox settles")
	p.Stop(t)

	byID, byText := map[string]int{}, map[string]int{}
	posts := 0
	for _, m := range fake.Messages("") {
		if m.BotID != fakeslack.BotID {
			continue
		}
		posts++
		if payload, ok := m.Metadata["event_payload"].(map[string]any); ok && m.Metadata["event_type"] == "holdfast_outbox" {
			byID[fmt.Sprint(payload["id"])]++
		}
		byText[m.Channel+"|"+m.ThreadTS+"|"+m.Text+"|"+string(m.Blocks)]++
	}
	dupID, dupText := 0, 0
	for _, n := range byID {
		dupID += n - 1
	}
	for _, n := range byText {
		dupText += n - 1
	}
	t.Logf("%d kill -9 cycles (%d mid-post): %d posts, %d duplicates by outbox id, %d by text; searches: %d in threads, %d in channel history",
		kills, midPost, posts, dupID, dupText, len(fake.Calls("conversations.replies")), len(fake.Calls("conversations.history")))
	require.GreaterOrEqual(t, midPost, cycles/2, "most kills land while a post is on the wire")
	require.Zero(t, dupText, "no message is shown twice")
	require.Zero(t, dupID, "no outbox message is posted twice")

	// Each hold card and queued line is recorded as sent with the ts of
	// its one message in Slack, so a decision's chat.update edits that
	// message.
	holdRe := regexp.MustCompile(`"block_id":"hold:([^"]+)"`)
	audited := 0
	for _, m := range fake.Messages("") {
		if m.BotID != fakeslack.BotID {
			continue
		}
		var key string
		if h := holdRe.FindStringSubmatch(string(m.Blocks)); h != nil {
			where := "thread"
			if m.Channel == "CHOLDS" {
				where = "holds"
			}
			key = "card:" + h[1] + ":" + where
		} else if strings.HasPrefix(m.Text, ":inbox_tray: Queued") {
			// The thread's one item, found through its run.
			ses, err := s.SessionGetByTag(ctx, "slack:"+m.Channel+":"+m.ThreadTS)
			require.NoError(t, err)
			runs, err := s.RunList(ctx, &store.RunListParams{SessionID: ses.ID, Limit: 10})
			require.NoError(t, err)
			require.Len(t, runs, 1)
			key = "queued:" + runs[0].ItemID
		} else {
			continue
		}
		row, err := s.SlackOutboxGetByKey(ctx, key)
		require.NoError(t, err, key)
		require.Equal(t, store.SlackOutboxSentSt, row.Status, key)
		require.Equal(t, m.TS, row.SentTS, "%s is recorded with the ts of its message", key)
		require.Equal(t, strconv.FormatInt(row.ID, 10), fmt.Sprint(m.Metadata["event_payload"].(map[string]any)["id"]), key)
		audited++
	}
	require.Equal(t, 3*threads, audited, "every card and queued line is in Slack")
}

// TestMain removes the binary the crash tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	bottest.Cleanup()
	os.Exit(code)
}
