package engine

import (
	"sync"
	"time"
)

// Backoff of a runner operation that keeps failing. A claim that fails for a
// reason that does not go away (a broken row at the head of the queue, a
// full disk) fails again on every wake-up, and the runner is woken by every
// enqueue, every decision and each worker's safety-net tick: with nothing
// spacing the attempts out, that was a retry (and an error line) per wake-up,
// hundreds a second on a busy or short-ticking runner, none of them useful.
const (
	firstRetryDelay = 50 * time.Millisecond
	maxRetryDelay   = 30 * time.Second
)

// retryGate spaces out attempts after failures: each failure in a row
// doubles the wait before the next attempt (firstRetryDelay up to
// maxRetryDelay), and a success resets it. It also says which failures are
// worth a log line: the first of a streak, and any whose error differs from
// the one before, so a persistent failure is logged once, not per attempt.
type retryGate struct {
	mu       sync.Mutex
	failures int
	wait     time.Duration
	until    time.Time
	since    time.Time
	lastErr  string
}

// ready reports whether an attempt may be made at now.
func (g *retryGate) ready(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures == 0 || !now.Before(g.until)
}

// failed records a failure at now and returns the wait before the next
// attempt, the failures in a row so far, and whether to log this one.
func (g *retryGate) failed(now time.Time, err error) (wait time.Duration, failures int, report bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures == 0 {
		g.since = now
	}
	g.failures++
	g.wait = min(max(2*g.wait, firstRetryDelay), maxRetryDelay)
	g.until = now.Add(g.wait)
	msg := err.Error()
	report = g.failures == 1 || msg != g.lastErr
	g.lastErr = msg
	return g.wait, g.failures, report
}

// succeeded resets the gate and returns how many failures in a row it ends
// (zero when there were none) and since when they lasted.
func (g *retryGate) succeeded() (failures int, since time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	failures, since = g.failures, g.since
	g.failures, g.wait, g.lastErr = 0, 0, ""
	return failures, since
}

// delay is the current wait after a failure (zero when not failing).
func (g *retryGate) delay() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wait
}
