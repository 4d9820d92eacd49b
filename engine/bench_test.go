package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
	"github.com/holdfast-bot/holdfast/store/sqlite/sqlitetest"
)

// minimalDoc is issue 16's minimal workflow: the template model's render
// of the brief, dispatched as a memo (Process → Output).
const minimalDoc = "# Workflow /bench\n\n## Trigger\n- **Command** `/bench`\n- **Status** `live`\n- **Summary** minimal\n\n" +
	"## Load Contract\n\n## Steps\n1. **Process** Draft.\n   ```prompt\n   # {{.Payload.title}}\n\n   {{.Payload.brief}}\n   ```\n2. **Output** Dispatch.\n\n" +
	"## Policy\n- **Timeout** `30s`\n"

// benchEngine is a started engine (4 workers, synchronous=FULL) with the
// four-step template workflow /bench that dispatches a memo; opts adjust
// its Config.
func benchEngine(b testing.TB, opts ...func(*Config)) (*Engine, *sqlite.DB, string) {
	return benchEngineWith(b, wfDoc("/bench"), opts...)
}

// benchEngineWith is benchEngine with the workflow doc as /bench.
func benchEngineWith(b testing.TB, doc string, opts ...func(*Config)) (*Engine, *sqlite.DB, string) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "bench.db"), Sync: "full"})
	if err != nil {
		b.Fatal(err)
	}
	m, _, err := library.New(db, nil).ImportWorkflow(ctx, "", doc)
	if err != nil {
		b.Fatal(err)
	}
	if w, err := db.WorkflowGetByMemoID(ctx, m.ID); err != nil || len(w.Errors) > 0 || w.Status != "live" {
		b.Fatalf("bench workflow: %v %+v", err, w)
	}
	cfg := Config{Workers: 4, DisableScheduler: true}
	for _, o := range opts {
		o(&cfg)
	}
	e := New(cfg, db, model.NewRegistry("template", model.Config{Tracer: cfg.Tracer}), nil)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Start(runCtx)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = db.Close()
	})
	return e, db, dir
}

// BenchmarkEnqueueToStart measures the latency from calling Enqueue to the
// run_started commit being announced, one item at a time on an idle engine
// (each enqueue waits until the previous run has finished), with the
// same-run single-row commit rate for scale.
func BenchmarkEnqueueToStart(b *testing.B) {
	e, _, dir := benchEngine(b)
	commits := sqlitetest.CommitsPerSecond(b, dir)
	started := make(chan string, 1024)
	finished := make(chan string, 1024)
	e.Subscribe(func(ev Event) {
		switch ev.Kind {
		case EventRunStarted:
			started <- ev.ItemID
		case EventRunFinished:
			finished <- ev.ItemID
		}
	})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		it, _, err := e.Enqueue(ctx, EnqueueParams{Command: "/bench", DedupeKey: fmt.Sprint(i),
			Payload: map[string]any{"title": "Bench", "brief": "one two three"}})
		if err != nil {
			b.Fatal(err)
		}
		for id := range started {
			if id == it.ID {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		for id := range finished {
			if id == it.ID {
				break
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(commits, "commits/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkRunsPerSecond measures end-to-end throughput: 8 goroutines
// enqueue b.N items of the four-step template workflow, 4 workers run each
// to a dispatched memo. It also measures single-row commits/s on the same
// disk in the same run and reports the ratio.
func BenchmarkRunsPerSecond(b *testing.B) {
	e, db, dir := benchEngine(b)
	measureRunsPerSecond(b, e, db, dir)
}

// BenchmarkRunsPerSecondMinimal is BenchmarkRunsPerSecond with issue 16's
// minimal workflow (template → memo): what the engine itself costs a run.
func BenchmarkRunsPerSecondMinimal(b *testing.B) {
	e, db, dir := benchEngineWith(b, minimalDoc)
	measureRunsPerSecond(b, e, db, dir)
}

// measureRunsPerSecond is BenchmarkRunsPerSecond's measurement on e.
func measureRunsPerSecond(b *testing.B, e *Engine, db *sqlite.DB, dir string) {
	commits := sqlitetest.CommitsPerSecond(b, dir)
	var finished atomic.Int64
	done := make(chan struct{}, 1)
	e.Subscribe(func(ev Event) {
		if ev.Kind == EventRunFinished {
			finished.Add(1)
			select {
			case done <- struct{}{}:
			default:
			}
		}
	})
	ctx := context.Background()
	n := max(b.N, 200)
	b.ResetTimer()
	start := time.Now()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if _, _, err := e.Enqueue(ctx, EnqueueParams{Command: "/bench", DedupeKey: fmt.Sprint(i),
					Payload: map[string]any{"title": "Bench", "brief": "one two three"}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	safety := time.NewTicker(100 * time.Millisecond)
	defer safety.Stop()
	for finished.Load() < int64(n) {
		select {
		case <-done:
		case <-safety.C: // notifications are wake-ups; the store is the truth
			c, err := db.QueueItemCountByStatus(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if c[store.ItemDone]+c[store.ItemFailed] >= int64(n) {
				finished.Store(int64(n))
			}
		}
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	c, err := db.RunCountByStatus(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if c[store.RunSucceeded] != int64(n) {
		b.Fatalf("want %d succeeded runs, have %v", n, c)
	}
	runs := float64(n) / elapsed.Seconds()
	b.ReportMetric(runs, "runs/s")
	b.ReportMetric(commits, "commits/s")
	b.ReportMetric(runs/commits, "runs-per-commit")
	// CPU per run is the figure least disturbed by a busy machine.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/run")
	b.ReportMetric(counterValue(b, e, "holdfast_items_claimed_on_enqueue_total")/float64(n), "claimed-on-enqueue")

}

// counterValue reads one of e's counters by name.
func counterValue(b testing.TB, e *Engine, name string) float64 {
	mfs, err := e.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	b.Fatalf("no counter %s", name)
	return 0
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
