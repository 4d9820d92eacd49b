package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
)

const replicaDraft = `# Replica drafts

## Trigger
- **Command** ¦/replica-draft¦
- **Status** ¦live¦
- **Summary** Drafts through a model that blocks

## Load Contract
- **Search** zqxnothing

## Steps
1. **Context** Search the library.
2. **Process** Draft.
   ¦¦¦prompt
   # {{.Payload.title}}

   {{.Payload.brief}}
   ¦¦¦
3. **Guard** Not empty.
4. **Output** Dispatch as a memo.

## Policy
- **Approval** ¦auto¦
- **Destination** ¦memo¦
- **Model** ¦openai:replica-model¦
- **Timeout** ¦2m¦
`

const replicaTick = `# Replica tick

## Trigger
- **Command** ¦/replica-tick¦
- **Invoke** ¦every 1s¦
- **Status** ¦live¦
- **Summary** A slot a second

## Load Contract
- **Search** zqxnothing

## Steps
1. **Context** Search the library.
2. **Process** Draft.
   ¦¦¦prompt
   # Tick {{.Payload.slot}}
   ¦¦¦
3. **Guard** Not empty.
4. **Output** Dispatch as a memo.

## Policy
- **Approval** ¦auto¦
- **Destination** ¦memo¦
- **Model** ¦template¦
`

// TestReplicasKill9 is SPEC §9's replica test through the real binary:
// three `bot serve` on one PostgreSQL database, items from Slack threads
// and through the HTTP API of every replica, a model that blocks, the
// leader killed with SIGKILL while every worker waits on the model, a
// replica started and another stopped meanwhile. Every item ends in one
// settled run with one memo; a per-second schedule fires each slot once
// across the change of leader; every Slack message is posted once, in order
// within its thread.
func TestReplicasKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	dir := t.TempDir()
	bin := bottest.Binary(t)

	fake := fakeslack.New(t)
	fake.SlowPosts(5 * time.Millisecond)
	llm := fakellm.New(true) // every call blocks until Unblock
	t.Cleanup(llm.Close)
	env := append(os.Environ(), "HOLDFAST_DB="+url, "HOLDFAST_ADMIN_PASSWORD=replica-test-pw",
		"HOLDFAST_STUCK_RUN=2s", "HOLDFAST_PASS_INTERVAL=1s", "HOLDFAST_WORKERS=4",
		"OPENAI_BASE_URL="+llm.URL, "OPENAI_API_KEY=sk-test",
		"SLACK_BOT_TOKEN=xoxb-test", "SLACK_SIGNING_SECRET="+secret, "SLACK_API_URL="+fake.APIURL(), "SLACK_APP_TOKEN=")
	for name, doc := range map[string]string{"draft.md": replicaDraft, "tick.md": replicaTick} {
		wf := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(wf, []byte(strings.ReplaceAll(doc, "¦", "`")), 0o644))
		require.NotContains(t, bottest.CLI(t, bin, env, "workflow", "import", wf), name+":", "the workflow compiles")
	}
	key := bottest.AdminKey(t, bin, env, "replicas")
	db, err := postgres.Open(ctx, postgres.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	var (
		mu    sync.Mutex
		procs []*bottest.Proc
	)
	start := func() *bottest.Proc {
		p := bottest.Start(t, bin, env)
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
		return p
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range procs {
				log := p.Log()
				t.Logf("replica %d's log (tail):\n%s", i, log[max(0, len(log)-4000):])
			}
		}
	})
	live := []*bottest.Proc{start(), start(), start()}
	began := time.Now()

	// Threads started by a mention on every replica: each enqueues an item
	// in its thread's session.
	const threads, apiPerThread = 20, 3
	roots := make([]string, threads)
	for i := range threads {
		roots[i] = fmt.Sprintf("1700000200.%06d", i+1)
		body := eventBody(fmt.Sprint("EvRep", i), mention("C1", "U1", roots[i], "", fmt.Sprintf("replica-draft zqxslack%d thread %d", i, i)))
		req, err := http.NewRequest(http.MethodPost, live[i%3].URL+"/slack/events", bytes.NewReader(body))
		require.NoError(t, err)
		ts := time.Now().Unix()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("X-Slack-Signature", sign(ts, body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// Then items through the HTTP API of every replica, into those threads.
	sessionOf := map[string]string{}
	for i, root := range roots {
		require.Eventually(t, func() bool {
			var ses struct{ ID string }
			if bottest.JSON(t, http.MethodGet, live[i%3].URL+"/api/sessions/resolve?tag=slack:C1:"+root, key, nil, &ses) != http.StatusOK {
				return false
			}
			sessionOf[root] = ses.ID
			return ses.ID != ""
		}, 20*time.Second, 20*time.Millisecond, "thread %d has its session", i)
	}
	n := 0
	for i, root := range roots {
		for j := range apiPerThread {
			p := live[n%3]
			require.Equal(t, http.StatusCreated, bottest.JSON(t, http.MethodPost, p.URL+"/api/workflows/replica-draft/enqueue", key, map[string]any{
				"dedupeKey": fmt.Sprint("api-", n), "sessionId": sessionOf[root],
				"payload": map[string]any{"title": fmt.Sprintf("Thread %d item %d", i, j), "brief": fmt.Sprintf("zqxapi%d body", n)},
			}, nil))
			n++
		}
	}
	items := threads + n
	require.GreaterOrEqual(t, items, 60)

	// Every worker of every replica waits on the model: kill the leader.
	require.Eventually(t, func() bool { return llm.Calls() >= 12 }, 30*time.Second, 10*time.Millisecond, "every worker is in a model call")
	leaderPID := func() int {
		l, err := db.LeaseGet(ctx, "leader")
		if err != nil {
			return 0
		}
		runner, _, _ := strings.Cut(l.Holder, "/") // host:pid:random
		parts := strings.Split(runner, ":")
		if len(parts) < 3 {
			return 0
		}
		pid, _ := strconv.Atoi(parts[len(parts)-2])
		return pid
	}
	var leader *bottest.Proc
	for _, p := range live {
		if p.Cmd.Process.Pid == leaderPID() {
			leader = p
		}
	}
	require.NotNil(t, leader, "one of the replicas leads")
	leader.Kill(t)
	killed := time.Now()
	live = slices.DeleteFunc(live, func(p *bottest.Proc) bool { return p == leader })
	live = append(live, start()) // a replica joins
	require.Eventually(t, func() bool {
		pid := leaderPID()
		return slices.ContainsFunc(live, func(p *bottest.Proc) bool { return p.Cmd.Process.Pid == pid })
	}, 10*time.Second, 10*time.Millisecond, "a live replica takes over")
	t.Logf("a new leader %.1fs after the kill (PassInterval 1s)", time.Since(killed).Seconds())
	llm.Unblock()
	live[0].Stop(t) // and one leaves cleanly
	live = live[1:]

	// Every item settles: the killed replica's runs are recovered.
	require.Eventually(t, func() bool {
		counts, err := db.RunCountsByStatus(ctx, &store.RunCountParams{Command: "/replica-draft"})
		return err == nil && counts.ByStatus[store.RunSucceeded] == int64(items)
	}, 45*time.Second, 50*time.Millisecond, "every item's run settles")

	// Slack: each run's lines arrive; the outbox drains.
	require.Eventually(t, func() bool {
		_, err := db.SlackOutboxNextDue(ctx)
		return err != nil
	}, 30*time.Second, 10*time.Millisecond, "the outbox drains")
	// The new leader's scheduler has fired slots of its own.
	// tickSlots reads the slots the schedule fired, in order.
	tickSlots := func() ([]time.Time, error) {
		ticks, err := db.RunList(ctx, &store.RunListParams{Command: "/replica-tick", Limit: 1000})
		if err != nil {
			return nil, err
		}
		var slots []time.Time
		for _, r := range ticks {
			it, err := db.QueueItemGetByID(ctx, r.ItemID)
			if err != nil {
				return nil, err
			}
			s, err := time.Parse(time.RFC3339, it.DedupeKey)
			if err != nil {
				return nil, fmt.Errorf("dedupe key %q: %w", it.DedupeKey, err)
			}
			slots = append(slots, s)
		}
		sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
		return slots, nil
	}
	require.Eventually(t, func() bool {
		slots, err := tickSlots()
		return err == nil && len(slots) > 0 && slots[len(slots)-1].After(killed.Add(3*time.Second))
	}, 15*time.Second, 50*time.Millisecond, "the schedule goes on after the change of leader")
	ended := time.Now()
	for _, p := range live {
		p.Stop(t)
	}

	// Each item: one run, settled, one memo.
	runs, err := db.RunList(ctx, &store.RunListParams{Command: "/replica-draft", Limit: 1000})
	require.NoError(t, err)
	perItem := map[string]int{}
	recovered := 0
	for _, r := range runs {
		perItem[r.ItemID]++
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		require.NotEmpty(t, r.DispatchMemoID)
		recovered += min(r.RecoveryAttempts, 1)
	}
	require.Len(t, perItem, items)
	for id, c := range perItem {
		require.Equal(t, 1, c, "item %s has one run", id)
	}
	require.Positive(t, recovered, "the killed replica's runs were recovered")
	for i := range threads {
		ms, err := db.MemoSearch(ctx, &store.MemoSearchParams{Query: fmt.Sprintf("zqxslack%d", i), IncludeUnlisted: true})
		require.NoError(t, err)
		require.Len(t, ms, 1, "thread %d's item dispatched one memo", i)
	}
	for i := range n {
		ms, err := db.MemoSearch(ctx, &store.MemoSearchParams{Query: fmt.Sprintf("zqxapi%d", i), IncludeUnlisted: true})
		require.NoError(t, err)
		require.Len(t, ms, 1, "API item %d dispatched one memo", i)
	}

	// The schedule: every second from the first slot to the last, once.
	slots, err := tickSlots()
	require.NoError(t, err)
	require.NotEmpty(t, slots)
	for i := 1; i < len(slots); i++ {
		require.Equal(t, time.Second, slots[i].Sub(slots[i-1]), "slots %s and %s: each slot once, none missing", slots[i-1], slots[i])
	}
	require.False(t, slots[0].After(began.Add(3*time.Second)), "the schedule fires from the start")
	require.False(t, slots[len(slots)-1].Before(ended.Add(-3*time.Second)), "and to the end")

	// Slack: no message twice; within a thread, messages in outbox order.
	byID, byText := map[string]int{}, map[string]int{}
	perThread := map[string][]int64{}
	texts := map[string][]string{} // thread → its messages' texts, in order
	for _, m := range fake.Messages("C1") {
		if m.BotID != fakeslack.BotID {
			continue
		}
		byText[m.ThreadTS+"|"+m.Text+"|"+string(m.Blocks)]++
		texts[m.ThreadTS] = append(texts[m.ThreadTS], m.Text)
		payload, ok := m.Metadata["event_payload"].(map[string]any)
		if !ok || m.Metadata["event_type"] != "holdfast_outbox" {
			continue
		}
		id := fmt.Sprint(payload["id"])
		byID[id]++
		n, err := strconv.ParseInt(id, 10, 64)
		require.NoError(t, err)
		perThread[m.ThreadTS] = append(perThread[m.ThreadTS], n)
	}
	dupID, dupText := 0, 0
	for _, c := range byID {
		dupID += c - 1
	}
	for _, c := range byText {
		dupText += c - 1
	}
	outOfOrder := 0
	for _, ids := range perThread {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				outOfOrder++
			}
		}
	}
	t.Logf("%d items (%d from Slack, %d through the API) over %d threads; %d runs recovered; %d slots; Slack: %d posts, %d duplicates by outbox id, %d by text, %d out of order",
		items, threads, n, threads, recovered, len(slots), len(byID), dupID, dupText, outOfOrder)
	for _, root := range roots {
		require.NotEmpty(t, perThread[root], "thread %s got its messages", root)
	}
	// Each run's started line comes before its memo's line, in its thread.
	threadOf := map[string]string{}
	for root, id := range sessionOf {
		threadOf[id] = root
	}
	for _, r := range runs {
		root := threadOf[r.SessionID]
		require.NotEmpty(t, root, "run %s belongs to a thread", r.ID)
		started := slices.IndexFunc(texts[root], func(s string) bool { return strings.Contains(s, "/runs/"+r.ID+"|") })
		dispatched := slices.IndexFunc(texts[root], func(s string) bool { return strings.Contains(s, "/memos/"+r.DispatchMemoID+"|") })
		require.GreaterOrEqual(t, started, 0, "run %s's started line is in its thread", r.ID)
		require.Greater(t, dispatched, started, "run %s's memo line is in its thread, after its started line", r.ID)
	}
	require.Zero(t, dupID, "no outbox message is posted twice")
	require.Zero(t, dupText, "no message is shown twice")
	require.Zero(t, outOfOrder, "messages arrive in order within each thread")
}
