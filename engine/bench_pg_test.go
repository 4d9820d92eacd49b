package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
)

// pgReplicas starts n engines (4 workers each), each on its own pool of
// one fresh PostgreSQL schema, as n replicas of the binary would be, with
// the four-step template workflow /bench.
func pgReplicas(b testing.TB, n int) ([]*Engine, []*postgres.DB, *pgtest.RoundTrips) {
	b.Helper()
	ctx := context.Background()
	url := pgtest.SchemaURL(b)
	rt := &pgtest.RoundTrips{}
	var (
		engines []*Engine
		dbs     []*postgres.DB
	)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, db := range dbs {
			_ = db.Close()
		}
	})
	for i := range n {
		db, err := postgres.Open(ctx, postgres.Config{URL: url, Tracer: rt})
		if err != nil {
			b.Fatal(err)
		}
		dbs = append(dbs, db)
		if i == 0 {
			if _, _, err := library.New(db, nil).ImportWorkflow(ctx, "", wfDoc("/bench")); err != nil {
				b.Fatal(err)
			}
		}
		e := New(Config{Workers: 4, DisableScheduler: true, RunnerID: fmt.Sprintf("replica-%d", i)}, db,
			model.NewRegistry("template", model.Config{}), nil)
		engines = append(engines, e)
		wg.Go(func() { _ = e.Start(runCtx) })
	}
	return engines, dbs, rt
}

// BenchmarkPostgresRunsPerSecond is BenchmarkRunsPerSecond on PostgreSQL
// with one and three replicas: items are enqueued through every replica in
// turn and any replica may run any of them. It also reports the database
// round trips per run (enqueue included) and the enqueue→start latency.
func BenchmarkPostgresRunsPerSecond(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("Replicas%d", replicas), func(b *testing.B) {
			engines, dbs, rt := pgReplicas(b, replicas)
			var finished atomic.Int64
			done := make(chan struct{}, 1)
			for _, e := range engines {
				e.Subscribe(func(ev Event) {
					if ev.Kind == EventRunFinished {
						finished.Add(1)
						select {
						case done <- struct{}{}:
						default:
						}
					}
				})
			}
			ctx := context.Background()
			n := max(b.N, 200)
			trips0 := rt.N()
			b.ResetTimer()
			start := time.Now()
			var (
				wg   sync.WaitGroup
				next atomic.Int64
			)
			for g := range 8 {
				wg.Go(func() {
					e := engines[g%len(engines)]
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
				})
			}
			wg.Wait()
			safety := time.NewTicker(100 * time.Millisecond)
			defer safety.Stop()
			for finished.Load() < int64(n) {
				select {
				case <-done:
				case <-safety.C: // notifications are wake-ups; the store is the truth
					c, err := dbs[0].QueueItemCountByStatus(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if c[store.ItemDone]+c[store.ItemFailed] >= int64(n) {
						finished.Store(int64(n))
					}
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			trips := rt.N() - trips0
			c, err := dbs[0].RunCountByStatus(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if c[store.RunSucceeded] != int64(n) {
				b.Fatalf("want %d succeeded runs, have %v", n, c)
			}
			b.ReportMetric(float64(n)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(trips)/float64(n), "round-trips/run")
		})
	}
}

// BenchmarkPostgresEnqueueToStart measures enqueue→run_started on
// PostgreSQL, one item at a time, with one replica and with three (the item
// enqueued on replica 0, started by whichever replica claims it first: the
// NOTIFY wake-up across replicas is what is measured).
func BenchmarkPostgresEnqueueToStart(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("Replicas%d", replicas), func(b *testing.B) {
			engines, _, _ := pgReplicas(b, replicas)
			started := make(chan string, 1024)
			for _, e := range engines {
				e.Subscribe(func(ev Event) {
					if ev.Kind == EventRunStarted {
						started <- ev.ItemID
					}
				})
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				it, _, err := engines[0].Enqueue(ctx, EnqueueParams{Command: "/bench", DedupeKey: fmt.Sprint(i),
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
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
