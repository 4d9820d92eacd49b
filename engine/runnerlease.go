package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// A running engine keeps a lease named for its runner id. While it is held
// the runs the engine took are alive, however old their heartbeats (a run
// claimed behind a busy worker writes none until it starts). Once it has
// lapsed unrenewed the process is gone, killed or its host lost, and its
// runs are recovered a lease's length after it died instead of a
// StuckRun (10 minutes) after their last heartbeat. A runner that never
// held one (an older version, a process that only runs passes) is left to
// the StuckRun rule.
func runnerLeaseName(runnerID string) string { return "runner:" + runnerID }

// renewRunnerLease takes or renews this engine's runner lease once.
func (e *Engine) renewRunnerLease(ctx context.Context) {
	held, err := e.store.LeaseAcquire(ctx, runnerLeaseName(e.cfg.RunnerID), e.cfg.RunnerID, e.cfg.Now(), e.cfg.leaseTTL())
	switch {
	case err != nil:
		e.logErr(ctx, "renewing the runner lease", err)
	case !held:
		e.log.ErrorContext(ctx, "another process holds this runner id's lease; give each process its own runner id",
			slog.String("runner_id", e.cfg.RunnerID))
	}
}

// keepRunnerLease renews the runner lease every PassInterval until ctx
// ends. It is not released at the end: a clean shutdown leaves no run
// behind, and one that did (a worker stuck past the shutdown) is taken
// over when the lease lapses.
func (e *Engine) keepRunnerLease(ctx context.Context) {
	t := time.NewTicker(e.cfg.PassInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.renewRunnerLease(ctx)
		}
	}
}

// runnersGone answers which of the runner ids have lapsed runner leases,
// as of now; ids without a lease at all are not gone (see above).
func (e *Engine) runnersGone(ctx context.Context, ids []string, now time.Time) (map[string]bool, error) {
	gone := map[string]bool{}
	for _, id := range ids {
		if _, seen := gone[id]; seen {
			continue
		}
		l, err := e.store.LeaseGet(ctx, runnerLeaseName(id))
		switch {
		case errors.Is(err, store.ErrNotFound):
			gone[id] = false
		case err != nil:
			return nil, err
		default:
			gone[id] = !l.ExpiresAt.After(now)
		}
	}
	return gone, nil
}

// pruneRunnerLeases drops, on the leader, the runner leases that lapsed
// more than StuckRun ago: every process start adds one. Any run such a
// runner left is the StuckRun rule's by then, so losing its lease loses
// nothing. It runs at most once a StuckRun.
func (e *Engine) pruneRunnerLeases(ctx context.Context) error {
	now := e.cfg.Now()
	if last := e.leasesPruned.Load(); last != 0 && now.Sub(time.Unix(0, last)) < e.cfg.StuckRun {
		return nil
	}
	n, err := e.store.LeasePrune(ctx, runnerLeaseName(""), now.Add(-e.cfg.StuckRun))
	if err != nil {
		return err
	}
	e.leasesPruned.Store(now.UnixNano())
	if n > 0 {
		e.log.InfoContext(ctx, "pruned the leases of runners gone", slog.Int64("leases", n))
	}
	return nil
}
