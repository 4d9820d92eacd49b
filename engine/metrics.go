package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the engine's Prometheus series, on a registry of its own so
// tests can build many engines and a scrape shows only what Holdfast exports.
type metrics struct {
	reg          *prometheus.Registry
	stepDuration *prometheus.HistogramVec
	finished     *prometheus.CounterVec
	recoveries   prometheus.Counter
	exhausted    prometheus.Counter
	resumed      prometheus.Counter
	// claimFailures counts failed claims: a persistent one shows as a
	// slowly growing count (the runner backs off), not as silence.
	claimFailures prometheus.Counter
	// claimedOnEnqueue counts items inserted already claimed because a
	// worker was waiting (the rest are claimed from the queue).
	claimedOnEnqueue prometheus.Counter
	// leader is 1 while this process holds the leader lease (SPEC §9):
	// summed over replicas it should read 1; 0 for longer than a takeover
	// means no replica runs the scheduler, recovery or hold timeouts.
	leader prometheus.Gauge
}

func newMetrics(e *Engine) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "holdfast_step_duration_seconds", Help: "Duration of workflow run steps by kind.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"kind"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_runs_finished_total", Help: "Runs settled by this process (runner, decision, terminate, timeout or recovery), by final status.",
		}, []string{"status"}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "holdfast_run_recoveries_total", Help: "Stuck runs taken over by recovery.",
		}),
		exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "holdfast_run_recoveries_exhausted_total", Help: "Runs settled recovery_exhausted.",
		}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "holdfast_runs_resumed_total", Help: "Approved runs resumed after a hold.",
		}),
		claimFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "holdfast_claim_failures_total", Help: "Claims of pending queue items that failed (retried with backoff).",
		}),
		claimedOnEnqueue: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "holdfast_items_claimed_on_enqueue_total", Help: "Queue items inserted already claimed, their run handed to a waiting worker.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "holdfast_leader", Help: "1 while this replica leads: it runs the scheduler, recovery, hold timeouts and reminders, and pruning.",
		}),
	}
	m.reg.MustRegister(m.stepDuration, m.finished, m.recoveries, m.exhausted, m.resumed, m.claimFailures, m.claimedOnEnqueue, m.leader,
		&storeCollector{e: e}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the engine's Prometheus registry; serve it at /metrics.
func (e *Engine) Registry() *prometheus.Registry { return e.met.reg }

var (
	queueDesc = prometheus.NewDesc("holdfast_queue_items", "Workflow queue items by status.", []string{"status"}, nil)
	runsDesc  = prometheus.NewDesc("holdfast_runs", "Workflow runs by status.", []string{"status"}, nil)
	holdsDesc = prometheus.NewDesc("holdfast_holds_open", "Open stewardship holds.", nil, nil)
)

// storeCollector reads the gauges from the store at scrape time (indexed
// counts), so every replica reports the same truth.
type storeCollector struct{ e *Engine }

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDesc
	ch <- runsDesc
	ch <- holdsDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if q, err := c.e.store.QueueItemCountByStatus(ctx); err == nil {
		for k, v := range q {
			ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(v), k)
		}
	}
	if r, err := c.e.store.RunCountByStatus(ctx); err == nil {
		for k, v := range r {
			ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(v), k)
		}
	}
	if n, err := c.e.store.HoldCountOpen(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(holdsDesc, prometheus.GaugeValue, float64(n))
	}
}
