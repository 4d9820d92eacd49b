package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/search"
	"github.com/holdfast-bot/holdfast/engine/thread"
	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Error kinds (SPEC §4.3).
const (
	KindCompile          = "compile"
	KindLoad             = "load"
	KindModelTransient   = "model_transient"
	KindModel            = "model"
	KindGuard            = "guard"
	KindDispatchConflict = "dispatch_conflict"
	KindDispatch         = "dispatch"
	KindTimeout          = "timeout"
	KindCancelled        = "cancelled"
)

// Step statuses on a run.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
	StepSkipped   = "skipped"
	StepHeld      = "held"
)

var (
	errRunCancelled = errors.New("run cancelled")
	errLeaseLost    = errors.New("run taken over elsewhere")
)

// checkpointAfter: a step that took at least this long is checkpointed at
// once, so a crash does not redo it. Quicker steps are folded into the next
// write (at the latest the settle): redoing them after a crash costs less
// than a commit, and the heartbeat is still refreshed well within StuckRun.
const checkpointAfter = 5 * time.Millisecond

// runState is what a run must keep to resume after its last finished step.
type runState struct {
	Context []workflow.ContextMemo `json:"context"`
	Output  string                 `json:"output"`
	// Thread is the conversation the Thread load read (SPEC §4.1), kept so
	// a resumed run renders the prompt it would have.
	Thread []workflow.ThreadMessage `json:"thread,omitempty"`
	// Edges is the report an Edges load read, so a resumed run's prompt
	// sees what its first execution saw.
	Edges *workflow.Edges `json:"edges,omitempty"`
	// BudgetPassed records that a steward let the run go on past its
	// Token budget: it is not held for it again.
	BudgetPassed bool `json:"budgetPassed,omitempty"`
}

// stepError is a failed step with its taxonomy kind.
type stepError struct {
	kind string
	err  error
}

func (s *stepError) Error() string { return s.err.Error() }
func (s *stepError) Unwrap() error { return s.err }

func failf(kind, format string, args ...any) *stepError {
	return &stepError{kind: kind, err: fmt.Errorf(format, args...)}
}

// exec is one execution of a run by this process.
type exec struct {
	e        *Engine
	run      *store.Run
	manifest *workflow.Manifest
	rawMan   json.RawMessage
	manDirty bool
	steps    []store.RunStep
	state    runState
	guards   []workflow.GuardOutcome
	events   []store.EventAppendParams
	evNotes  []Event
	lastSave time.Time
	log      *slog.Logger
	// async hands the final settle to a goroutine (see output).
	async bool
	// session is the run's session as read at sessionAt.
	session   *store.Session
	sessionAt time.Time
	// span is this execution's workflow.run span; handedOff says the
	// async settle ends it.
	span      trace.Span
	handedOff bool
}

// executeAsync is execute for pool workers: a successful run's settle is
// handed off so the worker can start its next run while the settle waits for
// its group commit. Workers then keep several settles in flight, which is
// what lets one commit carry many runs.
func (e *Engine) executeAsync(parent context.Context, r *store.Run) {
	e.run(parent, r, true)
}

// execute runs r from its first unfinished step to a settle, a suspension
// or a lost lease. It returns the run as last written (nil if it was lost).
func (e *Engine) execute(parent context.Context, r *store.Run) *store.Run {
	return e.run(parent, r, false)
}

func (e *Engine) run(parent context.Context, r *store.Run, async bool) *store.Run {
	x := &exec{e: e, run: r, lastSave: e.cfg.Now(), async: async,
		log: e.log.With(slog.String("run_id", r.ID), slog.String("item_id", r.ItemID), slog.String("command", r.Command))}
	parent = x.startSpan(parent)
	defer func() {
		if !x.handedOff {
			x.span.End()
		}
	}()
	ctx, cancel := context.WithCancelCause(parent)
	e.mu.Lock()
	e.inflight[r.ID] = cancel
	done := make(chan struct{})
	e.runDone[r.ID] = done
	if cause, ok := e.cancelReq[r.ID]; ok {
		delete(e.cancelReq, r.ID)
		cancel(cause)
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inflight, r.ID)
		delete(e.runDone, r.ID)
		e.mu.Unlock()
		close(done)
		cancel(nil)
	}()
	var (
		out *store.Run
		err error
	)
	if ctx.Err() == nil {
		out, err = x.runSteps(ctx)
	} else {
		err = ctx.Err()
	}
	if err == nil {
		return out
	}
	var se *stepError
	switch {
	case errors.Is(err, store.ErrLeaseLost) || errors.Is(context.Cause(ctx), errLeaseLost):
		x.log.WarnContext(parent, "run was taken over; dropping it", slog.Any("error", err))
		x.span.SetAttributes(tracing.RunStatus.String("taken_over"))
		return nil
	case errors.Is(context.Cause(ctx), errRunCancelled):
		return x.settleFailed(parent, KindCancelled, context.Cause(ctx).Error())
	case parent.Err() != nil:
		// Shutdown: leave the run for immediate recovery at the next start.
		e.release(context.WithoutCancel(parent), r)
		x.span.SetAttributes(tracing.RunStatus.String("released"))
		return nil
	case errors.As(err, &se):
		return x.settleFailed(parent, se.kind, se.Error())
	default:
		x.log.ErrorContext(parent, "run failed to persist; leaving it for recovery", slog.Any("error", err))
		return nil
	}
}

// startSpan starts this execution's workflow.run span in the trace of the
// run's item, with the run's provenance.
func (x *exec) startSpan(ctx context.Context) context.Context {
	if !x.e.traced {
		x.span = untraced
		return ctx
	}
	r := x.run
	ctx, x.span = x.e.tracer.Start(tracing.Join(ctx, r.TraceContext), tracing.SpanRun)
	if !x.span.IsRecording() {
		return ctx
	}
	s, _ := x.getSession(ctx, 0) // read once; the prompt reuses it
	origin := ""
	if s != nil {
		origin = s.Origin
	}
	x.span.SetAttributes(append(tracing.Provenance(s, tracing.SurfaceOf(r.OwnerUID, origin), r.Command),
		tracing.RunID.String(r.ID), tracing.ItemID.String(r.ItemID), tracing.RunAttempt.Int(r.RecoveryAttempts))...)
	if r.Decision != "" {
		x.span.SetAttributes(attribute.String("holdfast.run.decision", r.Decision), tracing.HoldIDKey.String(r.HoldID))
	}
	return ctx
}

func (x *exec) runSteps(ctx context.Context) (*store.Run, error) {
	if err := x.load(ctx); err != nil {
		return nil, err
	}
	if x.manifest.Replies() {
		// Known before any model call or hold: a reply with nowhere to
		// land fails now, not after stewards have approved it.
		if err := x.canReply(ctx); err != nil {
			return nil, err
		}
	}
	for i, st := range x.manifest.Steps {
		if x.steps[i].Status == StepSucceeded {
			continue
		}
		if x.overBudget() {
			return x.holdForBudget(ctx, i)
		}
		if st.Kind == workflow.KindOutput {
			return x.output(ctx, i)
		}
		if err := x.step(ctx, i, st); err != nil {
			return nil, err
		}
	}
	return nil, failf(KindCompile, "workflow has no Output step")
}

// load decodes the run's manifest and state, compiling the workflow memo
// afresh when the run has none yet (its first start).
func (x *exec) load(ctx context.Context) error {
	r := x.run
	if len(r.State) > 0 {
		if err := json.Unmarshal(r.State, &x.state); err != nil {
			return failf(KindCompile, "run state is unreadable: %v", err)
		}
	}
	if len(r.Guards) > 0 {
		_ = json.Unmarshal(r.Guards, &x.guards)
	}
	if len(r.Manifest) > 0 && string(r.Manifest) != "null" {
		x.manifest = &workflow.Manifest{}
		if err := json.Unmarshal(r.Manifest, x.manifest); err != nil {
			return failf(KindCompile, "stored manifest is unreadable: %v", err)
		}
		x.rawMan = r.Manifest
	} else {
		memo, err := x.e.store.MemoGetByID(context.WithoutCancel(ctx), r.WorkflowMemoID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return failf(KindCompile, "workflow memo %s no longer exists", r.WorkflowMemoID)
			}
			return err
		}
		m, raw, errs := x.e.lib.CompileMemo(ctx, memo)
		if len(errs) > 0 {
			return failf(KindCompile, "workflow does not compile: %s", errs.Error())
		}
		x.manifest, x.rawMan, x.manDirty = m, raw, true
	}
	x.steps = r.Steps
	if len(x.steps) != len(x.manifest.Steps) {
		x.steps = make([]store.RunStep, len(x.manifest.Steps))
		for i, st := range x.manifest.Steps {
			x.steps[i] = store.RunStep{Kind: st.Kind, Status: StepPending}
		}
	}
	x.budgetDecided()
	return nil
}

// step runs one non-Output step and records it.
func (x *exec) step(ctx context.Context, i int, st workflow.Step) error {
	ctx, span := x.e.startSpan(ctx, tracing.SpanStep, tracing.StepIndex.Int(i+1), tracing.StepKind.String(st.Kind))
	defer span.End()
	start := x.e.cfg.Now()
	rec := &x.steps[i]
	at := start.UTC() // API times are UTC (SPEC §7); start keeps its monotonic reading
	*rec = store.RunStep{Kind: st.Kind, Status: StepRunning, StartedAt: &at}
	stop := func() {}
	if st.Kind == workflow.KindProcess {
		// Only a model call can outlast StuckRun; other steps are local.
		stop = x.heartbeatDuring(ctx)
	}
	err := x.doStep(ctx, rec, st)
	stop()
	dur := x.e.cfg.Now().Sub(start)
	rec.DurationMs = dur.Milliseconds()
	x.e.met.stepDuration.WithLabelValues(st.Kind).Observe(dur.Seconds())
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			rec.Status, rec.ErrorKind, rec.Error = StepFailed, se.kind, se.Error()
			tracing.Fail(span, se.kind, err)
		}
		return err
	}
	rec.Status = StepSucceeded
	x.stepEvent(i)
	if dur >= checkpointAfter || x.e.cfg.Now().Sub(x.lastSave) > x.e.cfg.StuckRun/3 {
		return x.checkpoint(ctx)
	}
	return nil
}

func (x *exec) stepEvent(i int) {
	s := x.steps[i]
	x.events = append(x.events, transcript.Encode(transcript.RunStep{RunID: x.run.ID, Step: i + 1, Kind: s.Kind, Status: s.Status}, "engine"))
	x.evNotes = append(x.evNotes, Event{Kind: EventRunStep, RunID: x.run.ID, ItemID: x.run.ItemID, SessionID: x.run.SessionID, Status: s.Status})
}

// heartbeatDuring keeps a long step's run fresh so recovery does not take a
// run that is merely slow; a lost lease cancels the step, and so does a
// cancel request made by any process (read with the heartbeat).
func (x *exec) heartbeatDuring(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(x.e.cfg.heartbeatEvery())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				reason, err := x.e.store.RunHeartbeat(ctx, x.run.ID, x.run.Lease, x.e.cfg.Now())
				var cause error
				switch {
				case errors.Is(err, store.ErrLeaseLost):
					cause = errLeaseLost
				case err == nil && reason != "":
					cause = fmt.Errorf("%w by %s", errRunCancelled, reason)
				}
				if cause == nil {
					continue
				}
				if cancel := x.e.cancelFunc(x.run.ID); cancel != nil {
					cancel(cause)
				}
				return
			}
		}
	}()
	return func() { close(done) }
}

func (e *Engine) cancelFunc(runID string) context.CancelCauseFunc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight[runID]
}

func (x *exec) doStep(ctx context.Context, rec *store.RunStep, st workflow.Step) error {
	switch st.Kind {
	case workflow.KindContext:
		return x.loadContext(ctx)
	case workflow.KindProcess:
		return x.process(ctx, rec, st)
	case workflow.KindGuard:
		outcomes := st.Guard.Check(x.state.Output)
		x.guards = append(x.guards, outcomes...)
		if !workflow.Passed(outcomes) {
			var failed []string
			for _, o := range outcomes {
				if !o.Passed {
					failed = append(failed, o.Check+": "+o.Detail)
				}
			}
			return failf(KindGuard, "the output fails the Guard check %s", strings.Join(failed, "; "))
		}
		return nil
	}
	return failf(KindCompile, "unknown step kind %q", st.Kind)
}

// loadContext loads the Load Contract: Gate and Hook always (a missing one
// fails the run), Trigger when its payload field is set, Search as its
// query says (the best 5 unless it gives a limit), Thread the session's
// conversation.
func (x *exec) loadContext(ctx context.Context) error {
	var out []workflow.ContextMemo
	x.state.Thread = nil
	for _, l := range x.manifest.Loads {
		switch l.Class {
		case workflow.LoadGate, workflow.LoadHook:
			m, err := x.findMemo(ctx, l.Value)
			if err != nil {
				return failf(KindLoad, "%s memo %q (line %d): %v", l.Class, l.Value, l.Line, err)
			}
			out = append(out, workflow.ContextMemo{Class: l.Class, Title: m.Title, Body: m.Body})
		case workflow.LoadTrigger:
			name, _ := payloadPath(x.run.Payload, l.Value).(string)
			if name == "" {
				continue
			}
			m, err := x.findMemo(ctx, name)
			if err != nil {
				return failf(KindLoad, "trigger memo %q named by %s: %v", name, l.Value, err)
			}
			out = append(out, workflow.ContextMemo{Class: l.Class, Title: m.Title, Body: m.Body})
		case workflow.LoadSearch:
			q, err := search.Parse(l.Value)
			if err != nil { // the compiler refuses it; a manifest stored before may still hold one
				return failf(KindLoad, "search %q (line %d): %s", l.Value, l.Line, store.ReasonOf(err))
			}
			ms, err := x.e.store.MemoSearch(ctx, q.Params(x.e.cfg.Now(), search.DefaultLimit))
			if err != nil {
				return failf(KindLoad, "search %q: %v", l.Value, err)
			}
			for _, m := range ms {
				out = append(out, workflow.ContextMemo{Class: l.Class, Title: m.Title, Body: m.Body})
			}
		case workflow.LoadThread:
			msgs, err := thread.Load(context.WithoutCancel(ctx), x.e.store, x.run.SessionID)
			if err != nil {
				return failf(KindLoad, "thread of session %s: %v", x.run.SessionID, err)
			}
			x.state.Thread = msgs
			if len(msgs) > 0 {
				out = append(out, workflow.ContextMemo{Class: l.Class, Title: "Thread", Body: thread.Lines(msgs)})
			}
		case workflow.LoadEdges:
			rep, err := x.e.edgesReport(ctx, l.Value)
			if err != nil {
				return failf(KindLoad, "edges of understanding over %s (line %d): %v", l.Value, l.Line, err)
			}
			x.state.Edges = rep
			out = append(out, workflow.ContextMemo{Class: l.Class, Title: "Edges of understanding (last " + l.Value + ")",
				Body: EdgesMarkdown(rep)})
		}
	}
	x.state.Context = out
	return nil
}

func (x *exec) findMemo(ctx context.Context, name string) (*store.Memo, error) {
	m, err := x.e.store.MemoGetByID(ctx, name)
	if err == nil {
		return m, nil
	}
	m, err = x.e.store.MemoGetByTitle(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no memo has that title or id")
	}
	return m, err
}

// payloadPath resolves "payload.a.b" against the payload.
func payloadPath(payload map[string]any, path string) any {
	var cur any = payload
	for _, part := range strings.Split(strings.TrimPrefix(path, "payload."), ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

func (x *exec) promptData(ctx context.Context) workflow.PromptData {
	d := workflow.PromptData{Payload: x.run.Payload, Context: x.state.Context, Thread: x.state.Thread, Workflow: x.manifest,
		Session: map[string]any{}, Edges: x.state.Edges}
	if d.Thread == nil {
		d.Thread = []workflow.ThreadMessage{}
	}
	if s, err := x.getSession(ctx, 0); err == nil && s != nil {
		d.Session = map[string]any{"id": s.ID, "title": s.Title, "tags": s.Tags, "context": s.Context,
			"policy": s.Policy, "origin": s.Origin, "platform": s.Platform}
	}
	return d
}

// getSession reads the run's session (nil when the run has none), reusing a
// read younger than maxAge (0: any age). Nothing in a run uses the session's
// open-holds count, so it is not read. Reads use a context that does not
// cancel: they are short, and the driver would otherwise spawn a watcher
// goroutine per query.
func (x *exec) getSession(ctx context.Context, maxAge time.Duration) (*store.Session, error) {
	if x.run.SessionID == "" {
		return nil, nil
	}
	if x.session != nil && (maxAge == 0 || x.e.cfg.Now().Sub(x.sessionAt) <= maxAge) {
		return x.session, nil
	}
	s, err := x.e.store.SessionGetBare(context.WithoutCancel(ctx), x.run.SessionID)
	if err != nil {
		return nil, err
	}
	x.session, x.sessionAt = s, x.e.cfg.Now()
	return s, nil
}

// process renders the prompt and calls the model under the step timeout,
// retrying transient errors up to Policy.Retries.
func (x *exec) process(ctx context.Context, rec *store.RunStep, st workflow.Step) error {
	prompt, err := st.Render(x.promptData(ctx))
	if err != nil {
		return failf(KindCompile, "%v", err)
	}
	m, err := x.e.models.Get(x.manifest.Policy.Model)
	if err != nil {
		return failf(KindModel, "%v", err)
	}
	sctx := ctx
	if d := x.manifest.Policy.Timeout; d > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	resp, attempts, err := model.CompleteWithRetry(sctx, m, model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: prompt}},
	}, x.manifest.Policy.Retries, x.e.cfg.RetryBase)
	rec.Attempts = attempts
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || sctx.Err() != nil:
			return failf(KindTimeout, "step timed out after %s: %v", x.manifest.Policy.Timeout, err)
		case model.IsTransient(err):
			return failf(KindModelTransient, "%v", err)
		default:
			return failf(KindModel, "%v", err)
		}
	}
	rec.TokensIn, rec.TokensOut = resp.TokensIn, resp.TokensOut
	x.state.Output = resp.Content
	return nil
}

func (x *exec) stateJSON() json.RawMessage {
	b, _ := json.Marshal(x.state)
	return b
}

func (x *exec) guardsJSON() json.RawMessage {
	if x.guards == nil {
		return json.RawMessage("[]")
	}
	b, _ := json.Marshal(x.guards)
	return b
}

// usage is what the run's model calls have used so far, as runs record it.
func (x *exec) usage() *store.RunUsage {
	if x.manifest == nil {
		return nil
	}
	u := &store.RunUsage{Model: x.e.models.Spec(x.manifest.Policy.Model)}
	for _, s := range x.steps {
		u.TokensIn += int64(s.TokensIn)
		u.TokensOut += int64(s.TokensOut)
	}
	return u
}

func (x *exec) manifestArg() json.RawMessage {
	if x.manDirty {
		return x.rawMan
	}
	return nil
}

// checkpoint writes progress, pending transcript lines and the heartbeat.
func (x *exec) checkpoint(ctx context.Context) error {
	err := x.e.store.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: x.run.ID, Lease: x.run.Lease, Now: x.e.cfg.Now(),
		Manifest: x.manifestArg(), Steps: x.steps, State: x.stateJSON(), Guards: x.guardsJSON(), Usage: x.usage(), Events: x.events})
	if err != nil {
		return err
	}
	x.flushed()
	return nil
}

func (x *exec) flushed() {
	x.manDirty = false
	x.events = nil
	x.lastSave = x.e.cfg.Now()
	x.e.notify(x.evNotes...)
	x.evNotes = nil
}

// staleSettleRetries bounds how often one settle recompiles the workflows
// its dispatched memo affects and tries again.
const staleSettleRetries = 8

// settleFailed ends the run as failed (or cancelled) with kind.
func (x *exec) settleFailed(ctx context.Context, kind, msg string) *store.Run {
	status := store.RunFailed
	if kind == KindCancelled {
		status = store.RunCancelled
	}
	for i := range x.steps {
		switch x.steps[i].Status {
		case StepPending, StepHeld:
			x.steps[i].Status = StepSkipped
		case StepRunning:
			x.steps[i].Status, x.steps[i].ErrorKind, x.steps[i].Error = StepFailed, kind, msg
		}
	}
	return x.settle(ctx, status, kind, msg, nil)
}

func (x *exec) settle(ctx context.Context, status, kind, msg string, dispatch *store.DispatchParams,
	extra ...store.EventAppendParams) *store.Run {
	ctx = context.WithoutCancel(ctx) // a settle must not be torn by shutdown
	evs := append(append(slices.Clip(x.events), extra...),
		finishedEvent(&store.Run{ID: x.run.ID, Status: status, ErrorKind: kind, Error: msg}))
	p := &store.RunSettleParams{RunID: x.run.ID, Lease: x.run.Lease, Now: x.e.cfg.Now(),
		Status: status, ErrorKind: kind, Error: msg, Manifest: x.manifestArg(), Steps: x.steps, State: x.stateJSON(),
		Guards: x.guardsJSON(), Usage: x.usage(), Dispatch: dispatch, Events: evs}
	r, err := x.e.store.RunSettle(ctx, p)
	// A dispatched memo that workflows name (a Gate they were missing, a
	// stub that is a workflow memo) must recompile them in the same commit:
	// the store refuses the settle until it does. Rare, so the recompiles
	// are made only when asked for.
	for attempt := 0; dispatch != nil && errors.Is(err, store.ErrStaleCompile) && attempt < staleSettleRetries; attempt++ {
		if err = x.e.lib.PrepareDispatch(ctx, dispatch); err != nil {
			break
		}
		r, err = x.e.store.RunSettle(ctx, p)
	}
	if err != nil {
		if dispatch != nil && errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrLeaseLost) {
			x.log.WarnContext(ctx, "dispatch refused", slog.Any("error", err))
			x.steps[len(x.steps)-1].Status = StepFailed
			x.steps[len(x.steps)-1].ErrorKind = KindDispatchConflict
			reason := store.ReasonOf(err) // for people: "memo is at version 2, expected 1"
			x.steps[len(x.steps)-1].Error = reason
			return x.settle(ctx, store.RunFailed, KindDispatchConflict, reason, nil)
		}
		if errors.Is(err, store.ErrLeaseLost) {
			x.log.WarnContext(ctx, "run was taken over before it settled", slog.Any("error", err))
		} else {
			x.log.ErrorContext(ctx, "settling run", slog.Any("error", err))
		}
		return nil
	}
	x.flushed()
	x.span.SetAttributes(tracing.RunStatus.String(r.Status))
	if status == store.RunFailed {
		tracing.Fail(x.span, kind, errors.New(msg))
	}
	if dispatch != nil {
		x.e.notify(Event{Kind: EventMemoDispatched, RunID: r.ID, ItemID: r.ItemID, SessionID: r.SessionID, Status: r.Status})
	}
	x.e.notify(Event{Kind: EventRunFinished, RunID: r.ID, ItemID: r.ItemID, SessionID: r.SessionID, Status: r.Status})
	if status != store.RunSucceeded {
		x.log.InfoContext(ctx, "run ended", slog.String("status", status), slog.String("error_kind", kind), slog.String("error", msg))
	}
	return r
}
