// Package engine runs workflows (SPEC §4): the queue, the runner pool, holds,
// recovery, dispatch and the scheduler. It knows nothing of HTTP or Slack:
// the API, the console and the Slack bridge call Enqueue and Decide and
// Subscribe to its events; everything durable goes through store.Store.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Config tunes the engine; zero values take the SPEC §1 defaults.
type Config struct {
	Workers  int
	StuckRun time.Duration
	// MaxRecovery bounds recoveries of one run (0: the default 5; negative:
	// none, a stuck run settles recovery_exhausted at once).
	MaxRecovery  int
	PassInterval time.Duration
	// RunnerID names this process in runs it takes (default host:pid and
	// a random part); it must be unique to the process.
	RunnerID string
	// SlackStewards are Slack user ids allowed to decide holds.
	SlackStewards []string
	// RetryBase is the first backoff of transient model retries (default 500ms).
	RetryBase time.Duration
	// Now is the clock for hold timeouts and recovery; tests move it.
	Now func() time.Time
	// DisableScheduler leaves schedule Invokes alone (tests, one-shot CLIs).
	DisableScheduler bool
	// Elect makes this engine one of several replicas on one database
	// (SPEC §9): it campaigns for the leader lease, and runs the scheduler,
	// recovery, hold timeouts and reminders (and whatever surfaces run
	// through Lead) only while it holds it. Without Elect the engine is the
	// only process on its database (SQLite) and simply leads.
	Elect bool
	// Tracer records the enqueue, each run, step, hold wait and dispatch
	// as spans (SPEC §10). Nil: no tracing, and no cost for it.
	Tracer trace.TracerProvider
	// CancelPoll bounds how long a cancel request made by another process
	// takes to reach a model call running here (default 1s): the running
	// step's heartbeat reads it at least this often.
	CancelPoll time.Duration
}

// heartbeatEvery is how often a long step's run is refreshed.
func (c *Config) heartbeatEvery() time.Duration {
	return max(min(c.StuckRun/3, c.CancelPoll), time.Millisecond)
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.StuckRun <= 0 {
		c.StuckRun = 10 * time.Minute
	}
	switch {
	case c.MaxRecovery == 0:
		c.MaxRecovery = 5
	case c.MaxRecovery < 0:
		c.MaxRecovery = 0 // never recover: a stuck run settles recovery_exhausted
	}
	if c.PassInterval <= 0 {
		c.PassInterval = 30 * time.Second
	}
	if c.RunnerID == "" {
		// The random part tells a restarted container (pid 1 again) from
		// the process it replaces, whose runner lease must be seen to lapse.
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.RunnerID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.RetryBase <= 0 {
		c.RetryBase = 500 * time.Millisecond
	}
	if c.CancelPoll <= 0 {
		c.CancelPoll = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Event kinds delivered to subscribers.
const (
	EventRunStarted     = transcript.TypeRunStarted
	EventRunStep        = transcript.TypeRunStep
	EventHoldOpened     = transcript.TypeHoldOpened
	EventHoldDecided    = transcript.TypeHoldDecided
	EventRunFinished    = transcript.TypeRunFinished
	EventMemoDispatched = transcript.TypeMemoDispatched
)

// EventHoldApprovedPartial is an approval that leaves its hold open, waiting
// for more stewards (Policy Approvals > 1): a Slack card shows it.
const EventHoldApprovedPartial = transcript.TypeHoldApprovedPartial

// Event is a wake-up for subscribers, sent after the change committed. The
// durable record is the session transcript; a dropped Event loses nothing.
type Event struct {
	Kind      string
	RunID     string
	HoldID    string
	ItemID    string
	SessionID string
	// Status is the run's or hold's status after the change, when known.
	Status string
}

// Engine is the workflow engine.
type Engine struct {
	claimMu sync.Mutex // one claim at a time in this process (see claim)
	cfg     Config
	store   store.Store
	models  *model.Registry
	lib     *library.Service
	log     *slog.Logger
	met     *metrics
	tracer  trace.Tracer
	traced  bool // Config.Tracer was set

	// wake carries "there may be work" to one idle worker; each worker that
	// finds a full batch passes it on, so a burst fans out without every
	// enqueue waking every worker.
	wake chan struct{}
	// handoff carries runs this process holds and no worker has started
	// to whichever worker is free first: runs taken over by recovery, and
	// those a claim took beyond the one its worker starts.
	handoff chan *store.Run
	// idle counts workers waiting for work less the enqueues that reserved
	// one of them (reserveWorker); direct carries each such enqueue's run,
	// claimed in its own transaction, to a waiting worker. At most Workers
	// reservations are ever outstanding, so a send to direct never blocks.
	idle   atomic.Int64
	direct chan *store.Run
	// stopped says the pool has stopped: a run claimed on enqueue after
	// that is released for recovery, not handed to a worker (under mu).
	stopped bool

	// resumeHint says approved runs may be waiting, so workers do not
	// spend a write transaction per wake-up looking for none.
	resumeHint atomic.Bool
	// claims and resumes space out retries of a claim (or a resume) that
	// keeps failing, whatever wakes the workers (see retryGate).
	claims, resumes retryGate
	// settling tracks settles a worker handed off (see exec.output);
	// settleSlots bounds how many are outstanding.
	settling    sync.WaitGroup
	settleSlots chan struct{}

	mu       sync.Mutex
	inflight map[string]context.CancelCauseFunc // runID → cancel of its context
	// cancelReq holds cancellations of runs claimed here but not started
	// yet (waiting in handoff); they are cancelled as they start.
	cancelReq map[string]error
	// runDone is closed when this process stops executing a run (settled,
	// suspended or dropped), for callers that cancel and then wait.
	runDone map[string]chan struct{}
	subs    []chan Event

	// holder names this engine in the leader lease; lead is whether it
	// holds it (see leader.go); started says Start was called.
	holder  string
	lead    leadership
	started atomic.Bool
	// leasesPruned is when pruneRunnerLeases last ran (unix ns, by Now).
	leasesPruned atomic.Int64
}

// New returns an engine; call Start to run the pool and scheduler.
func New(cfg Config, s store.Store, models *model.Registry, log *slog.Logger) *Engine {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:       cfg,
		store:     s,
		models:    models,
		lib:       library.New(s, log),
		log:       log,
		wake:      make(chan struct{}, 1),
		handoff:   make(chan *store.Run, 64+claimAhead*cfg.Workers),
		direct:    make(chan *store.Run, cfg.Workers),
		inflight:  map[string]context.CancelCauseFunc{},
		cancelReq: map[string]error{},
		tracer:    tracing.Tracer(cfg.Tracer),
		traced:    cfg.Tracer != nil,
		runDone:   map[string]chan struct{}{},
		holder:    newHolder(cfg.RunnerID),
		lead:      leadership{changed: make(chan struct{}), poke: make(chan struct{}, 1)},
	}
	e.settleSlots = make(chan struct{}, 4*cfg.Workers)
	e.resumeHint.Store(true)
	e.met = newMetrics(e)
	if !cfg.Elect { // the only process on its database: it leads, always
		e.lead.ctx, e.lead.cancel = context.WithCancel(context.Background())
		e.met.leader.Set(1)
	}
	return e
}

// Subscribe registers fn for every Event. fn runs on its own goroutine and
// never blocks the runner: when a subscriber falls more than a few thousand
// events behind, further events are dropped for it (they are wake-ups only).
func (e *Engine) Subscribe(fn func(Event)) {
	ch := make(chan Event, 4096)
	e.mu.Lock()
	e.subs = append(e.subs, ch)
	e.mu.Unlock()
	go func() {
		for ev := range ch {
			fn(ev)
		}
	}()
}

// notify sends evs to every subscriber. It is also where settled runs are
// counted (holdfast_runs_finished_total): every path that settles a run —
// the runner, a rejection, a terminate, a hold timeout, recovery — announces
// it here once, after its commit, so counting here misses none of them, as
// counting at the runner's own settle did (cancelled and exhausted runs).
func (e *Engine) notify(evs ...Event) {
	e.mu.Lock()
	subs := e.subs
	e.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind == EventRunFinished {
			e.met.finished.WithLabelValues(ev.Status).Inc()
		}
		for _, ch := range subs {
			select {
			case ch <- ev:
			default:
			}
		}
	}
}

// onWork is the store's wake-up (store.WorkSubscribe): items enqueued or a
// hold approved by any process wake a worker; a cancel request for a run
// executing here cancels it at once rather than at its next heartbeat.
func (e *Engine) onWork(w store.WorkNotice) {
	switch w.Kind {
	case store.WorkQueued:
		e.signal()
	case store.WorkResumable:
		e.resumeHint.Store(true)
		e.signal()
	case store.WorkLeaseFree:
		if w.Reason == leaderLease || w.Reason == "" {
			e.pokeCampaign()
		}
	case store.WorkCancel:
		cause := fmt.Errorf("%w by %s", errRunCancelled, w.Reason)
		e.mu.Lock()
		for _, id := range w.RunIDs {
			if cancel := e.inflight[id]; cancel != nil {
				cancel(cause)
			}
		}
		e.mu.Unlock()
	}
}

// signal wakes one idle worker (or leaves a wake-up for the next).
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Start runs the worker pool, and while this process leads (see Elect) the
// maintenance loop (recovery, hold timeouts and reminders) and the
// scheduler, until ctx ends; then it waits for workers to stop and gives up
// the lead. Runs interrupted by shutdown are released for immediate
// recovery at the next start, or by another replica.
func (e *Engine) Start(ctx context.Context) error {
	e.started.Store(true)
	// The runner lease is held before any run is taken, and kept until the
	// last one has been settled or released below.
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	e.renewRunnerLease(leaseCtx)
	var keeper sync.WaitGroup
	keeper.Go(func() { e.keepRunnerLease(leaseCtx) })
	defer func() {
		stopLease()
		keeper.Wait()
	}()
	// Work committed by any process wakes this one: on PostgreSQL an
	// enqueue, a decision or a cancel request on another replica (SPEC §9).
	work := e.store.WorkSubscribe(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for w := range work {
			e.onWork(w)
		}
	})
	for i := range e.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.worker(ctx, i)
		}()
	}
	wg.Go(func() { e.Lead(ctx, e.maintain) })
	if !e.cfg.DisableScheduler {
		wg.Go(func() { e.Lead(ctx, e.schedule) })
	}
	var campaign sync.WaitGroup
	if e.cfg.Elect {
		campaign.Go(func() { e.campaign(ctx) })
	}
	e.signal()
	<-ctx.Done()
	wg.Wait()
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	campaign.Wait() // leader work has stopped: the lease is released
	e.settling.Wait()
	// Recovered runs, and runs claimed on enqueue, that no worker took:
	// release them for the next start.
	for {
		select {
		case r := <-e.handoff:
			e.release(context.WithoutCancel(ctx), r)
		case r := <-e.direct:
			e.release(context.WithoutCancel(ctx), r)
		default:
			return nil
		}
	}
}

// reserveWorker takes one waiting worker for a run claimed on enqueue, if
// any is waiting; the enqueue then hands its run over with handToWorker, or
// gives the reservation back with unreserveWorker.
func (e *Engine) reserveWorker() bool {
	for {
		n := e.idle.Load()
		if n <= 0 {
			return false
		}
		if e.idle.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (e *Engine) unreserveWorker() { e.idle.Add(1) }

// handToWorker gives a run claimed on enqueue to the worker reserved for
// it. Once the pool has stopped the run is released instead, so the next
// start (or another replica) recovers it at once.
func (e *Engine) handToWorker(ctx context.Context, r *store.Run) {
	e.mu.Lock()
	if !e.stopped {
		select {
		case e.direct <- r:
			e.mu.Unlock()
			return
		default: // cannot happen (see direct); never block an enqueue on it
		}
	}
	e.mu.Unlock()
	e.release(context.WithoutCancel(ctx), r)
}

// release leaves a run this process holds for immediate recovery (at the
// next start, or by another replica): its heartbeat is set far in the past.
func (e *Engine) release(ctx context.Context, r *store.Run) {
	if _, err := e.store.RunHeartbeat(ctx, r.ID, r.Lease, time.Unix(1, 0)); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		e.log.ErrorContext(ctx, "releasing run", slog.String("run_id", r.ID), slog.Any("error", err))
	}
}

func (e *Engine) worker(ctx context.Context, n int) {
	tick := time.NewTicker(e.cfg.PassInterval)
	defer tick.Stop()
	for {
		e.idle.Add(1)
		select {
		case r := <-e.direct: // its enqueue took this worker's idle slot
			e.executeAsync(ctx, r)
			continue
		case <-ctx.Done():
			e.idle.Add(-1)
			return
		case r := <-e.handoff:
			e.idle.Add(-1)
			e.executeAsync(ctx, r)
			continue
		case <-e.wake:
			e.idle.Add(-1)
		case <-tick.C:
			e.idle.Add(-1)
			e.resumeHint.Store(true) // decided on another replica, perhaps
		}
		for ctx.Err() == nil {
			runs := e.take(ctx)
			for _, r := range runs {
				e.executeAsync(ctx, r)
			}
			// Only an empty batch means the queue is drained: a short one
			// may have lost some of the heads it listed to another
			// replica's claim (SKIP LOCKED), which may be short too, and
			// the items behind them would then wait for the tick
			// (BenchmarkPostgresRunsPerSecond with three replicas stalled
			// 30 s in 2 of 10 rounds; none in 12 with this rule).
			if len(runs) == 0 {
				break
			}
		}
	}
}

// claimAhead is how many runs per worker a claim may take beyond the one
// its worker starts; they wait in handoff for whichever worker is free
// first. Claims are one at a time and each waits for a group commit, so
// their size bounds the pool: claims of three runs, each worker running its
// own one after another, held issue 16's benchmark to ~1,050 runs/s with
// the writer partly idle, and left an item claimed behind a slow run
// waiting out that run while other workers were free. Runs claimed ahead
// show as running (their run_started line is written) before they start,
// so the bound stays what it was: two per worker, three a pass per worker
// with the one each starts (SPEC §4.4).
const claimAhead = 2

// take is the work this worker does next: a run another claim took ahead,
// else a fresh claim (or approved runs to resume), of which it starts the
// first and hands the rest to whichever workers are free first. What does
// not fit in handoff (a claim takes every pending item that shares a
// session with the ones it took) this worker runs itself, in order.
func (e *Engine) take(ctx context.Context) []*store.Run {
	if r := e.waiting(); r != nil {
		return []*store.Run{r}
	}
	e.claimMu.Lock()
	defer e.claimMu.Unlock()
	if r := e.waiting(); r != nil { // another worker's claim filled handoff meanwhile
		return []*store.Run{r}
	}
	runs := e.acquire(ctx, 1+max(0, claimAhead*e.cfg.Workers-len(e.handoff)))
	if len(runs) < 2 {
		return runs
	}
	own := runs[:1]
	for _, r := range runs[1:] {
		select {
		case e.handoff <- r:
		default:
			own = append(own, r)
		}
	}
	return own
}

// waiting answers a run from handoff, or nil when none waits.
func (e *Engine) waiting() *store.Run {
	select {
	case r := <-e.handoff:
		return r
	default:
		return nil
	}
}

// acquire takes work for the pool (its caller holds claimMu): approved runs
// first, then up to claim pending items. A full batch passes the wake-up on
// to another worker. After a failure, the failing step is skipped until its
// retry delay has passed, however often workers are woken; a timer wakes
// one when it has.
func (e *Engine) acquire(ctx context.Context, claim int) []*store.Run {
	if e.resumes.ready(e.cfg.Now()) && e.resumeHint.Swap(false) {
		runs, err := e.store.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: e.cfg.RunnerID, Limit: 5, Now: e.cfg.Now()})
		if err != nil {
			e.resumeHint.Store(true)
			e.retryLater(ctx, &e.resumes, "resuming approved runs", err)
		} else {
			e.recovered(ctx, &e.resumes, "resuming approved runs")
		}
		if len(runs) > 0 {
			e.resumeHint.Store(true) // there may be more
			e.met.resumed.Add(float64(len(runs)))
			e.signal()
			return runs
		}
	}
	if !e.claims.ready(e.cfg.Now()) {
		return nil
	}
	runs, err := e.claim(ctx, claim)
	if err != nil {
		if e.retryLater(ctx, &e.claims, "claiming queue items", err) {
			e.met.claimFailures.Inc()
		}
		return nil
	}
	e.recovered(ctx, &e.claims, "claiming queue items")
	if len(runs) == claim {
		e.signal()
	}
	return runs
}

// retryLater records a failure of what on g, logs it if it is the first of
// its streak (or a different error), and wakes a worker when the retry delay
// has passed. Cancellation is shutdown, not a failure: it reports false.
func (e *Engine) retryLater(ctx context.Context, g *retryGate, what string, err error) bool {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return false
	}
	wait, n, report := g.failed(e.cfg.Now(), err)
	time.AfterFunc(wait, e.signal)
	if report {
		e.log.ErrorContext(ctx, what, slog.Any("error", err), slog.Int("failures", n), slog.Duration("retry_in", wait))
	} else {
		e.log.DebugContext(ctx, what, slog.Any("error", err), slog.Int("failures", n), slog.Duration("retry_in", wait))
	}
	return true
}

// recovered ends g's failure streak, if any, with one line saying so.
func (e *Engine) recovered(ctx context.Context, g *retryGate, what string) {
	if n, since := g.succeeded(); n > 0 {
		e.log.InfoContext(ctx, what+" recovered", slog.Int("failures", n), slog.Duration("failing_for", e.cfg.Now().Sub(since)))
	}
}

// claim takes up to limit pending items, oldest first: the engine picks
// them and writes each run's run_started line with its claim; an item
// another runner took meanwhile is skipped by the store's compare-and-set.
// Callers hold claimMu: claims are one at a time within this process, so
// its workers never race each other for the same heads; a claim that lost
// every item to another process looks again.
func (e *Engine) claim(ctx context.Context, limit int) ([]*store.Run, error) {
	var runs []*store.Run
	for range 3 {
		items, err := e.store.QueueItemListPending(ctx, limit)
		if err != nil || len(items) == 0 {
			return nil, err
		}
		p := &store.QueueItemClaimParams{RunnerID: e.cfg.RunnerID, Now: e.cfg.Now(), Claims: make([]store.ItemClaim, len(items))}
		for i, it := range items {
			p.Claims[i] = store.ItemClaim{ItemID: it.ID, Events: []store.EventAppendParams{transcript.Encode(
				transcript.RunStarted{RunID: store.RunIDForItem(it.ID), ItemID: it.ID, Command: it.Command, DedupeKey: it.DedupeKey},
				"engine")}}
		}
		if runs, err = e.store.QueueItemClaim(ctx, p); err != nil {
			return nil, err
		}
		if len(runs) > 0 {
			break
		}
	}
	for _, r := range runs {
		e.notify(Event{Kind: EventRunStarted, RunID: r.ID, ItemID: r.ItemID, SessionID: r.SessionID, Status: r.Status})
	}
	return runs, nil
}

// untraced is the span of a service that does not trace: starting none
// costs nothing, not even an allocation.
var untraced = trace.SpanFromContext(context.Background())

// startSpan starts a span named name when the engine traces, and otherwise
// answers ctx with a span that records nothing.
func (e *Engine) startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !e.traced {
		return ctx, untraced
	}
	return e.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

func (e *Engine) logErr(ctx context.Context, what string, err error) {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return
	}
	e.log.ErrorContext(ctx, what, slog.Any("error", err))
}

// maintenanceEvery is how often recovery and hold timeouts are checked: the
// safety-net interval, but often enough that a stuck run is found within
// about half a StuckRun of going stale.
func (e *Engine) maintenanceEvery() time.Duration {
	return min(e.cfg.PassInterval, max(e.cfg.StuckRun/2, 10*time.Millisecond))
}

func (e *Engine) maintain(ctx context.Context) {
	tick := time.NewTicker(e.maintenanceEvery())
	defer tick.Stop()
	for {
		recovered, _, err := e.recover(ctx)
		if err != nil {
			e.logErr(ctx, "recovering stuck runs", err)
		}
		for i, r := range recovered {
			select {
			case e.handoff <- r:
			case <-ctx.Done():
				// Leadership lost or shutting down: what no worker took is
				// left for the next leader to recover at once.
				for _, r := range recovered[i:] {
					e.release(context.WithoutCancel(ctx), r)
				}
				return
			}
		}
		if _, err := e.expireHolds(ctx); err != nil {
			e.logErr(ctx, "expiring holds", err)
		}
		if _, err := e.remindHolds(ctx); err != nil {
			e.logErr(ctx, "sending hold reminders", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// recover takes over stale runs, and gives up on those that used their
// recoveries (MaxRecovery): the rule is here, the store applies it.
func (e *Engine) recover(ctx context.Context) (recovered, exhausted []*store.Run, err error) {
	now := e.cfg.Now()
	// A run is stuck once its heartbeat is StuckRun old, or a lease's
	// length old when the runner that took it is gone (runnerlease.go).
	stuckBefore := now.Add(-e.cfg.StuckRun)
	staleBefore := now.Add(-min(e.cfg.leaseTTL(), e.cfg.StuckRun))
	stale, err := e.store.RunListStuck(ctx, staleBefore, 64)
	if err != nil || len(stale) == 0 {
		return nil, nil, err
	}
	var others []string
	for _, r := range stale {
		if r.RunnerID != e.cfg.RunnerID && !r.HeartbeatAt.Before(stuckBefore) {
			others = append(others, r.RunnerID)
		}
	}
	gone, err := e.runnersGone(ctx, others, now)
	if err != nil {
		return nil, nil, err
	}
	p := &store.RunRescueParams{RunnerID: e.cfg.RunnerID, StaleBefore: staleBefore, Now: now}
	for _, r := range stale {
		if !r.HeartbeatAt.Before(stuckBefore) && !gone[r.RunnerID] {
			continue // its runner is alive, or may be: not stuck yet
		}
		lease := store.RunLease{ID: r.ID, Lease: r.Lease}
		if r.RecoveryAttempts < e.cfg.MaxRecovery {
			p.Recover = append(p.Recover, lease)
			continue
		}
		out := store.RunOutcome{Status: store.RunRecoveryExhausted, ItemStatus: store.ItemFailed, ErrorKind: store.RunRecoveryExhausted,
			Error: fmt.Sprintf("run stopped heart-beating %d times (last at %s); giving up after %d recoveries",
				r.RecoveryAttempts+1, r.HeartbeatAt.Format(time.RFC3339), r.RecoveryAttempts)}
		p.Exhaust = append(p.Exhaust, store.RunExhaust{RunLease: lease, Outcome: out,
			Events: []store.EventAppendParams{finishedEvent(&store.Run{ID: r.ID, Status: out.Status, ErrorKind: out.ErrorKind, Error: out.Error})}})
	}
	recovered, exhausted, err = e.store.RunRescueMany(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range recovered {
		e.log.WarnContext(ctx, "recovering stuck run", slog.String("run_id", r.ID), slog.String("item_id", r.ItemID),
			slog.Int("attempt", r.RecoveryAttempts))
	}
	for _, r := range exhausted {
		e.log.ErrorContext(ctx, "run exhausted its recoveries", slog.String("run_id", r.ID), slog.String("item_id", r.ItemID))
		e.notify(Event{Kind: EventRunFinished, RunID: r.ID, ItemID: r.ItemID, SessionID: r.SessionID, Status: r.Status})
	}
	e.met.recoveries.Add(float64(len(recovered)))
	e.met.exhausted.Add(float64(len(exhausted)))
	return recovered, exhausted, nil
}

// leaderPass is RunPass's leader work: recovery, hold timeouts, reminders.
func (e *Engine) leaderPass(ctx context.Context, res *PassResult) ([]*store.Run, error) {
	recovered, exhausted, err := e.recover(ctx)
	if err != nil {
		return nil, err
	}
	res.Recovered, res.Exhausted = len(recovered), len(exhausted)
	if _, err := e.expireHolds(ctx); err != nil {
		return recovered, err
	}
	if _, err := e.remindHolds(ctx); err != nil {
		return recovered, err
	}
	if err := e.pruneRunnerLeases(ctx); err != nil {
		return recovered, err
	}
	return recovered, nil
}

func finishedEvent(r *store.Run) store.EventAppendParams {
	return transcript.Encode(transcript.RunFinished{RunID: r.ID, Status: r.Status, ErrorKind: r.ErrorKind, Error: r.Error}, "engine")
}

// PassResult is what one pass did (SPEC §4.4).
type PassResult struct {
	Pending     int64 `json:"pending"`
	Started     int   `json:"started"`
	FailedItems int   `json:"failedItems"`
	Resumed     int   `json:"resumed"`
	Recovered   int   `json:"recovered"`
	Exhausted   int   `json:"exhausted"`
}

// RunPass runs one pass synchronously: resume approved runs (≤5), claim and
// run pending items (≤3 per worker), and, when this process leads (see
// passLead), recover stuck runs, expire holds and send the hold reminders
// that are due. An empty queue costs one indexed count. Runs it starts
// finish even if the caller (an HTTP cron request) goes away.
func (e *Engine) RunPass(ctx context.Context) (PassResult, error) {
	ctx = context.WithoutCancel(ctx)
	var res PassResult
	resumed, err := e.store.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: e.cfg.RunnerID, Limit: 5, Now: e.cfg.Now()})
	if err != nil {
		return res, err
	}
	res.Resumed = len(resumed)
	e.met.resumed.Add(float64(len(resumed)))
	if res.Pending, err = e.store.QueueItemCountPending(ctx); err != nil {
		return res, err
	}
	var claimed []*store.Run
	if res.Pending > 0 {
		e.claimMu.Lock()
		claimed, err = e.claim(ctx, 3*e.cfg.Workers)
		e.claimMu.Unlock()
		if err != nil {
			return res, err
		}
	}
	res.Started = len(claimed)
	var recovered []*store.Run
	if leads, done := e.passLead(ctx); leads {
		recovered, err = e.leaderPass(ctx, &res)
		done()
		if err != nil {
			return res, err
		}
	}

	work := append(append(append([]*store.Run{}, resumed...), claimed...), recovered...)
	results := make([]*store.Run, len(work))
	sem := make(chan struct{}, e.cfg.Workers)
	var wg sync.WaitGroup
	for i, r := range work {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = e.execute(ctx, r)
		}()
	}
	wg.Wait()
	for _, r := range results[len(resumed) : len(resumed)+len(claimed)] {
		if r != nil && r.Settled() && r.Status != store.RunSucceeded {
			res.FailedItems++
		}
	}
	return res, ctx.Err()
}
