package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// leaderLease names the lease row whose holder runs the work that must
// happen once among replicas (SPEC §9): the scheduler, stuck-run recovery,
// hold timeouts and reminders, and pruning.
const leaderLease = "leader"

// leaseTTL is how long one renewal holds the lease. The leader renews every
// PassInterval, so half an interval is its margin for a slow renewal; a
// follower retries when the lease it saw expires, so a dead leader is
// replaced about leaseTTL after its last renewal, within the 2 ×
// PassInterval that SPEC §9 allows.
func (c *Config) leaseTTL() time.Duration { return c.PassInterval * 3 / 2 }

// takeover bounds how long a dead leader's work can go undone: what a new
// leader's scheduler catches up on.
func (c *Config) takeover() time.Duration { return 2 * c.PassInterval }

// leadership is whether this process leads, and the context its leader
// work runs under: cancelled the moment leadership is lost.
type leadership struct {
	mu     sync.Mutex
	ctx    context.Context // nil while following
	cancel context.CancelFunc
	// changed is closed (and replaced) at every change, for waiters.
	changed chan struct{}
	// running counts leader work under way (Lead's fn calls); drained is
	// closed when it falls to zero after leadership was lost.
	running int
	drained chan struct{}
	// poke wakes the campaign when the lease may be free (a release).
	poke chan struct{}
}

// newHolder names this engine in the lease: the runner id (who, for
// people) and a random part, so two engines of one process never share it.
func newHolder(runnerID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return runnerID + "/" + hex.EncodeToString(b[:])
}

// Leading reports whether this process leads (always, for an engine that
// does not elect).
func (e *Engine) Leading() bool {
	e.lead.mu.Lock()
	defer e.lead.mu.Unlock()
	return e.lead.ctx != nil
}

// leadState answers the leader context (nil while following) and a channel
// closed at the next change.
func (e *Engine) leadState() (context.Context, <-chan struct{}) {
	e.lead.mu.Lock()
	defer e.lead.mu.Unlock()
	return e.lead.ctx, e.lead.changed
}

// Lead runs fn whenever this process leads, with a context that ends when
// leadership is lost or ctx ends, and returns when ctx ends. Work that must
// happen once among replicas runs this way, in the engine and in surfaces
// alike (the bridge's pruning), so the rule of who does it lives here.
func (e *Engine) Lead(ctx context.Context, fn func(ctx context.Context)) {
	for ctx.Err() == nil {
		e.lead.mu.Lock()
		lctx, changed := e.lead.ctx, e.lead.changed
		if lctx != nil {
			e.lead.running++
		}
		e.lead.mu.Unlock()
		if lctx == nil {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(lctx, cancel)
		fn(wctx)
		stop()
		cancel()
		e.lead.mu.Lock()
		if e.lead.running--; e.lead.running == 0 && e.lead.drained != nil {
			close(e.lead.drained)
			e.lead.drained = nil
		}
		e.lead.mu.Unlock()
		select { // fn returned on its own: wait for the next term
		case <-ctx.Done():
		case <-lctx.Done():
		}
	}
}

// promote makes this process the leader; base bounds the leader context.
func (e *Engine) promote(base context.Context, why string) {
	e.lead.mu.Lock()
	defer e.lead.mu.Unlock()
	if e.lead.ctx != nil {
		return
	}
	e.lead.ctx, e.lead.cancel = context.WithCancel(context.WithoutCancel(base))
	close(e.lead.changed)
	e.lead.changed = make(chan struct{})
	e.met.leader.Set(1)
	e.log.InfoContext(base, "this replica leads", slog.String("holder", e.holder), slog.String("why", why),
		slog.Duration("lease_ttl", e.cfg.leaseTTL()))
}

// demote stops leader work at once and answers a channel closed when it has
// all returned.
func (e *Engine) demote(ctx context.Context, why string, err error) <-chan struct{} {
	e.lead.mu.Lock()
	defer e.lead.mu.Unlock()
	drained := make(chan struct{})
	if e.lead.ctx == nil {
		close(drained)
		return drained
	}
	e.lead.cancel()
	e.lead.ctx, e.lead.cancel = nil, nil
	close(e.lead.changed)
	e.lead.changed = make(chan struct{})
	e.met.leader.Set(0)
	attrs := []any{slog.String("holder", e.holder), slog.String("why", why)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	e.log.WarnContext(ctx, "this replica no longer leads", attrs...)
	if e.lead.running == 0 {
		close(drained)
	} else {
		e.lead.drained = drained
	}
	return drained
}

// campaign takes and renews the leader lease until ctx ends, then stops
// leader work and releases the lease so a follower takes over at once.
// Each renewal may take no longer than the lease it extends still lasts:
// a leader that cannot renew in time stops leading before its lease can
// expire under it.
func (e *Engine) campaign(ctx context.Context) {
	ttl := e.cfg.leaseTTL()
	var validUntil time.Time // of the lease this process holds (monotonic)
	failures := 0
	for ctx.Err() == nil {
		leading := e.Leading()
		start := time.Now()
		deadline := start.Add(e.cfg.PassInterval)
		if leading {
			deadline = validUntil
		}
		callCtx, cancel := context.WithDeadline(ctx, deadline)
		held, err := e.store.LeaseAcquire(callCtx, leaderLease, e.holder, e.cfg.Now(), ttl)
		cancel()
		if ctx.Err() != nil {
			break
		}
		wait := e.cfg.PassInterval - time.Since(start) // renewals every PassInterval, however long each takes
		switch {
		case err != nil:
			if leading {
				e.demote(ctx, "renewal failed", err)
			}
			if failures++; failures == 1 {
				e.log.ErrorContext(ctx, "leader lease", slog.String("holder", e.holder), slog.Any("error", err))
			}
		case held:
			failures = 0
			validUntil = start.Add(ttl)
			e.promote(ctx, "lease taken")
		default:
			failures = 0
			if leading {
				e.demote(ctx, "lease taken by another replica", nil)
			}
			wait = e.followerWait(ctx)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-e.lead.poke:
		}
		t.Stop()
	}
	<-e.demote(ctx, "shutting down", nil)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := e.store.LeaseRelease(rctx, leaderLease, e.holder); err != nil {
		e.log.ErrorContext(rctx, "releasing the leader lease", slog.String("holder", e.holder), slog.Any("error", err))
	}
}

// followerWait is how long a follower waits before trying again: until the
// lease it was refused expires (a dead leader is replaced then), at most a
// PassInterval. A release wakes it sooner (see onWork).
func (e *Engine) followerWait(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PassInterval)
	defer cancel()
	l, err := e.store.LeaseGet(ctx, leaderLease)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return time.Millisecond // released meanwhile
		}
		return e.cfg.PassInterval
	}
	return min(max(l.ExpiresAt.Sub(e.cfg.Now())+time.Millisecond, time.Millisecond), e.cfg.PassInterval)
}

// pokeCampaign wakes the campaign at once.
func (e *Engine) pokeCampaign() {
	select {
	case e.lead.poke <- struct{}{}:
	default:
	}
}

// passLead says whether RunPass may do leader work, and what to call after
// it. A running engine answers whether it leads; an engine that was not
// started (the cron path of a process that does not run the loop) takes the
// lease for the pass if it is free, and gives it back after.
func (e *Engine) passLead(ctx context.Context) (bool, func()) {
	if !e.cfg.Elect || e.started.Load() {
		return e.Leading(), func() {}
	}
	held, err := e.store.LeaseAcquire(ctx, leaderLease, e.holder, e.cfg.Now(), e.cfg.leaseTTL())
	if err != nil {
		e.logErr(ctx, "leader lease for a pass", err)
		return false, func() {}
	}
	if !held {
		return false, func() {}
	}
	return true, func() {
		if err := e.store.LeaseRelease(ctx, leaderLease, e.holder); err != nil {
			e.logErr(ctx, "releasing the leader lease after a pass", err)
		}
	}
}
