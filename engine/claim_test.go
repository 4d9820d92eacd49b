package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
)

// start runs b.eng until the test ends (for bundles set up with noStart,
// so that work can be queued before the first pass).
func (b *testBundle) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.eng.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFinished waits until every item in ids has a run_finished event and
// returns their runs as stored.
func (b *testBundle) waitFinished(t *testing.T, ids ...string) map[string]*store.Run {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]*store.Run{}
	deadline := time.After(15 * time.Second)
	for len(out) < len(want) {
		select {
		case ev := <-b.events:
			if ev.Kind != EventRunFinished || !want[ev.ItemID] {
				continue
			}
			r, err := b.db.RunGetByID(context.Background(), ev.RunID)
			require.NoError(t, err)
			out[ev.ItemID] = r
		case <-deadline:
			t.Fatalf("timed out: %d of %d items finished", len(out), len(want))
		}
	}
	return out
}

// TestItemsSharingASessionAllRun is SPEC §4.2: pending items that share a
// session are claimed together and every one of them runs, whether a pool
// worker or one synchronous pass takes them.
func TestItemsSharingASessionAllRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		shared int
		pass   bool
	}{
		{name: "PoolThreeShared", shared: 3},
		{name: "PoolSixShared", shared: 6},
		{name: "PassThreeShared", shared: 3, pass: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, setupOpts{noStart: true})
			b.workflow(t, "/draft")
			ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Title: "shared", Origin: store.OriginUser, Policy: "auto"})
			require.NoError(t, err)
			var ids []string
			for i := range tc.shared {
				ids = append(ids, b.enqueue(t, EnqueueParams{Command: "/draft", SessionID: ses.ID,
					Payload: map[string]any{"title": fmt.Sprint("Shared ", i), "brief": "b"}}).ID)
			}
			alone := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"title": "Alone", "brief": "b"}})
			ids = append(ids, alone.ID)

			var runs map[string]*store.Run
			if tc.pass {
				res, err := b.eng.RunPass(ctx)
				require.NoError(t, err, "one pass claims items sharing a session")
				require.Equal(t, len(ids), res.Started)
				require.Zero(t, res.FailedItems)
				runs = map[string]*store.Run{}
				for _, id := range ids {
					r, err := b.db.RunGetByID(ctx, store.RunIDForItem(id))
					require.NoError(t, err)
					runs[id] = r
				}
			} else {
				b.start(t)
				runs = b.waitFinished(t, ids...)
			}
			for id, r := range runs {
				require.Equal(t, store.RunSucceeded, r.Status, "item %s: %s", id, r.Error)
			}
			evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Limit: 1000})
			require.NoError(t, err)
			started := 0
			for i, ev := range evs {
				if i > 0 {
					require.True(t, ev.TS.After(evs[i-1].TS), "the shared transcript keeps a strict order")
				}
				if ev.Type == EventRunStarted {
					started++
				}
			}
			require.Equal(t, tc.shared, started, "each shared item's run_started is in the session")
		})
	}
}

// records keeps the log records of one engine for a test to read.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// count is how many records at level or above have a message starting with
// prefix.
func (r *records) count(level slog.Level, prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level >= level && strings.HasPrefix(rec.Message, prefix) {
			n++
		}
	}
	return n
}

// TestPersistentClaimFailureBacksOff: a claim that fails for a reason that
// does not go away (here an item naming a session that does not exist, so
// its run_started line has nowhere to go) is retried after a growing delay
// and logged once, however often the runner is woken: wake-ups (enqueues,
// decisions, each worker's safety-net tick) used to retry it every time.
func TestPersistentClaimFailureBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true})
	b.workflow(t, "/draft")
	w, err := b.db.WorkflowGetByCommand(ctx, "/draft")
	require.NoError(t, err)
	_, _, err = b.db.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: w.MemoID,
		Command: "/draft", DedupeKey: "poison", SessionID: "ses_gone", Payload: map[string]any{"brief": "x"}})
	require.NoError(t, err)
	logs := &records{}
	e := New(Config{Workers: 1, DisableScheduler: true, Now: b.clock.Now}, b.db, model.NewRegistry("template", model.Config{}), slog.New(logs))
	failures := func() float64 { return scrape(t, e)["holdfast_claim_failures_total"] }

	const wakeups = 200
	for range wakeups {
		require.Empty(t, e.acquire(ctx, 3))
	}
	require.Equal(t, 1.0, failures(), "%d wake-ups in a burst try the failing claim once", wakeups)
	last := e.claims.delay()
	require.Positive(t, last)
	for round := 2; round <= 6; round++ {
		b.clock.Advance(last)
		for range wakeups {
			require.Empty(t, e.acquire(ctx, 3))
		}
		require.Equal(t, float64(round), failures(), "one more attempt once the delay has passed")
		require.Greater(t, e.claims.delay(), last, "each failure waits longer")
		last = e.claims.delay()
	}
	require.Equal(t, 1, logs.count(slog.LevelError, "claiming queue items"), "a failure that repeats is logged once")

	// The cause goes away (the item no longer names a missing session): the
	// next attempt after the delay claims it, and the streak's end is logged.
	b.data.Exec(t, `UPDATE workflow_queue_items SET session_id = '' WHERE dedupe_key = 'poison'`)
	b.clock.Advance(last)
	runs := e.acquire(ctx, 3)
	require.Len(t, runs, 1)
	require.Equal(t, 1, logs.count(slog.LevelInfo, "claiming queue items recovered"))
	require.Equal(t, 6.0, failures())
	require.Zero(t, e.claims.delay(), "a success resets the backoff")
	r := e.execute(ctx, runs[0])
	require.NotNil(t, r)
	require.Equal(t, store.RunSucceeded, r.Status, r.Error)
}

// TestClaimOnEnqueue: an enqueue that finds a worker of this process
// waiting inserts its item already claimed, with the run and its
// run_started line, and that worker runs it; with no worker waiting the item
// is left pending for a claim, as before.
func TestClaimOnEnqueue(t *testing.T) {
	t.Parallel()
	t.Run("IdleWorkerTakesTheRunFromTheEnqueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/draft")
		waitIdle(t, b.eng, 4)
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"title": "T", "brief": "x"}})
		require.Equal(t, store.ItemClaimed, it.Status, "claimed in the enqueue's own transaction")
		require.Equal(t, store.RunIDForItem(it.ID), it.RunID)
		r := b.waitFinished(t, it.ID)[it.ID]
		require.Equal(t, store.RunSucceeded, r.Status)
		require.Equal(t, "run_started", b.eventTypes(t, it.SessionID)[0])
		require.Equal(t, 1, strings.Count(strings.Join(b.eventTypes(t, it.SessionID), " "), "run_started"))
		require.EqualValues(t, 1, counterValue(t, b.eng, "holdfast_items_claimed_on_enqueue_total"))
	})
	t.Run("NoWorkerWaitingLeavesItPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/draft")
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x"}})
		require.Equal(t, store.ItemPending, it.Status)
		require.Empty(t, it.RunID)
	})
	t.Run("ARepeatClaimsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/draft")
		waitIdle(t, b.eng, 4)
		it := b.enqueue(t, EnqueueParams{Command: "/draft", DedupeKey: "k", Payload: map[string]any{"brief": "x"}})
		b.waitFinished(t, it.ID)
		waitIdle(t, b.eng, 4)
		again, created, err := b.eng.Enqueue(context.Background(), EnqueueParams{Command: "/draft", DedupeKey: "k"})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, it.ID, again.ID)
		require.EqualValues(t, 4, b.eng.idle.Load(), "the reservation is given back")
	})
}

// TestClaimedOnEnqueueRunIsRecovered: a process that dies right after an
// enqueue claimed its item leaves a running run no worker executes; another
// process recovers it like any claimed run, and the dead one's lease is
// fenced off.
func TestClaimedOnEnqueueRunIsRecovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true, cfg: Config{StuckRun: time.Minute}})
	b.workflow(t, "/draft")
	dead := New(Config{RunnerID: "dead", DisableScheduler: true}, b.db, model.NewRegistry("template", model.Config{}), nil)
	dead.idle.Store(1) // a worker waits, and the process dies before it runs anything
	it, created, err := dead.Enqueue(ctx, EnqueueParams{Command: "/draft", Payload: map[string]any{"title": "T", "brief": "x"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, store.ItemClaimed, it.Status)
	var lost *store.Run
	select {
	case lost = <-dead.direct:
	default:
		t.Fatal("the claimed run was not handed to the waiting worker")
	}
	require.Equal(t, "dead", lost.RunnerID)

	res, err := b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Started, "a claimed item is no claim's")
	require.Zero(t, res.Recovered, "a fresh heartbeat is not stuck")
	b.clock.Advance(2 * time.Minute)
	res, err = b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Recovered)
	r, err := b.db.RunGetByID(ctx, it.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, r.Status, "recovered and run to the end")
	require.Equal(t, 1, r.RecoveryAttempts)
	require.Nil(t, dead.execute(ctx, lost), "the dead process's late execution is fenced off")
	memos, err := b.db.RunListByDispatchMemo(ctx, r.DispatchMemoID, 10)
	require.NoError(t, err)
	require.Len(t, memos, 1, "one dispatch")
}

// waitIdle waits until n workers of e are waiting for work.
func waitIdle(t *testing.T, e *Engine, n int64) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d workers idle", n), func() bool { return e.idle.Load() == n })
}

// TestClaimedRunsGoToAnyFreeWorker: runs one worker claimed beyond the one
// it starts wait for whichever worker is free first, not for the claiming
// worker's own run. Claims used to be per worker (up to three, run one
// after another), so an item claimed behind a slow run waited out that
// whole run while another worker sat idle.
func TestClaimedRunsGoToAnyFreeWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{cfg: Config{Workers: 2}})
	doc := strings.Replace(wfDoc("/slow"), "## Policy\n", "## Policy\n- **Model** `openai:slow-model`\n", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	// A call whose prompt names a gate waits for it; any other answers at once.
	var mu sync.Mutex
	gates := map[string]chan struct{}{"gate-a1": make(chan struct{}), "gate-a2": make(chan struct{}), "gate-b": make(chan struct{})}
	b.llm.Script(func(_ int, body map[string]any) map[string]any {
		raw, _ := json.Marshal(body["messages"])
		var wait chan struct{}
		mu.Lock()
		for name, gate := range gates {
			if strings.Contains(string(raw), name) {
				wait = gate
			}
		}
		mu.Unlock()
		if wait != nil {
			<-wait
		}
		return nil
	})
	open := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		close(gates[name])
		delete(gates, name)
	}
	t.Cleanup(func() {
		for name := range gates {
			open(name)
		}
	})
	arrived := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-b.llm.Arrived():
			case <-time.After(10 * time.Second):
				t.Fatal("model call never arrived")
			}
		}
	}
	item := func(brief string) *store.QueueItem {
		return b.enqueue(t, EnqueueParams{Command: "/slow", Payload: map[string]any{"title": "T", "brief": brief}})
	}

	waitIdle(t, b.eng, 2)
	item("gate-a1")
	item("gate-a2")
	arrived(2) // both workers are busy
	slow, quick := item("gate-b"), item("no gate")
	require.Equal(t, store.ItemPending, slow.Status, "no worker was free")
	require.Equal(t, store.ItemPending, quick.Status)
	open("gate-a1") // one worker finishes, claims both and starts the slow one
	arrived(1)
	open("gate-a2") // the other worker is free now
	waitUntil(t, 10*time.Second, "the quick item's run to succeed", func() bool {
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(quick.ID))
		return err == nil && r.Status == store.RunSucceeded
	})
	s, err := b.db.RunGetByID(ctx, store.RunIDForItem(slow.ID))
	require.NoError(t, err)
	require.Equal(t, store.RunRunning, s.Status, "the quick item did not wait for the slow one")
}
