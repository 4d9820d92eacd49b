package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"unicode"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// EnqueueParams enqueues one workflow item.
type EnqueueParams struct {
	// Command is the workflow's slash command ("/draft-memo"; the slash may
	// be left off).
	Command   string
	DedupeKey string
	Payload   map[string]any
	SessionID string
	// OwnerUID is who asked ("slack:U123", "user:<id>", "key:<id>",
	// "engine"); the self-approval rule compares deciders with it.
	OwnerUID string
}

// NotCompiledError refuses an enqueue of a workflow whose memo does not
// compile. It is a store.ErrConflict (the workflow is not live), and carries
// the first compile error so every surface can say what to fix and where.
type NotCompiledError struct {
	Command string
	MemoID  string
	First   store.CompileError
	Count   int // compile errors in all
}

func (e *NotCompiledError) Error() string {
	return fmt.Sprintf("%v: workflow %s does not compile (line %d: %s), so it is not live and accepts no items",
		store.ErrConflict, e.Command, e.First.Line, e.First.Message)
}

// Unwrap makes errors.Is(err, store.ErrConflict) hold.
func (e *NotCompiledError) Unwrap() error { return store.ErrConflict }

// Enqueue adds an item to the workflow's queue, idempotently on (workflow,
// DedupeKey): a repeat answers the existing item and false. An unknown
// command wraps store.ErrNotFound, a workflow that is not live
// store.ErrConflict (a *NotCompiledError when its memo does not compile);
// input that breaks the limits every surface shares wraps store.ErrInvalid,
// and a payload.targetMemoId naming no memo wraps store.ErrInvalid (SPEC
// §4.2: refused at enqueue, not when the run dispatches). Every surface
// enqueues through here, so these rules hold on all of them. Routing reads
// only the workflow index: nothing is compiled here. A new item wakes the
// runner at once.
func (e *Engine) Enqueue(ctx context.Context, p EnqueueParams) (_ *store.QueueItem, _ bool, err error) {
	if err := checkEnqueue(p); err != nil {
		return nil, false, err
	}
	p.Payload = titled(p.Payload)
	cmd := strings.TrimSpace(p.Command)
	if cmd != "" && !strings.HasPrefix(cmd, "/") {
		cmd = "/" + cmd
	}
	// The item carries this span's context: its run, whenever and wherever
	// it executes, joins the trace that asked for it.
	ctx, span := e.startSpan(ctx, tracing.SpanEnqueue, tracing.WorkflowCommand.String(cmd))
	defer func() {
		tracing.Fail(span, "", err)
		span.End()
	}()
	w, err := e.store.WorkflowGetByCommand(ctx, cmd)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("no workflow has the command %s: %w", cmd, store.ErrNotFound)
		}
		return nil, false, err
	}
	if len(w.Errors) > 0 { // indexed as draft whatever its Status says: name the real reason
		return nil, false, &NotCompiledError{Command: cmd, MemoID: w.MemoID, First: w.Errors[0], Count: len(w.Errors)}
	}
	if w.Status != workflow.StatusLive {
		return nil, false, fmt.Errorf("%w: workflow %s is %s, not live, so it accepts no items", store.ErrConflict, cmd, w.Status)
	}
	id := store.NewID("itm")
	key := p.DedupeKey
	if key == "" {
		key = id // no key: every enqueue is its own item
	}
	ip := &store.QueueItemInsertParams{ID: id, OwnerUID: p.OwnerUID, WorkflowMemoID: w.MemoID, Command: w.Command,
		DedupeKey: key, Payload: p.Payload, SessionID: p.SessionID}
	if e.traced {
		ip.TraceContext = tracing.FromContext(ctx)
	}
	if target, _ := p.Payload["targetMemoId"].(string); target != "" {
		// Dispatch updates the stub only while it is still at this version.
		m, err := e.store.MemoGetByID(ctx, target)
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, store.Refuse(store.ErrInvalid, "payload.targetMemoId %q names no memo", target)
		} else if err != nil {
			return nil, false, err
		}
		ip.TargetVersion = m.ContentVersion
	}
	origin := store.OriginWorkflow
	if p.SessionID == "" {
		// Items enqueued with no session follow the workflow's own policy,
		// which is what posture auto means.
		ip.NewSession = &store.SessionCreateParams{Title: w.Title, Origin: store.OriginWorkflow, Policy: "auto",
			CallerUser: p.OwnerUID, Context: map[string]any{"command": w.Command}}
	} else if ses, err := e.store.SessionGetBare(ctx, p.SessionID); err != nil {
		return nil, false, err
	} else {
		origin = ses.Origin
	}
	it, run, created, err := e.insert(ctx, ip)
	if err != nil {
		return nil, false, err
	}
	if run != nil {
		// Announced before the worker can announce anything of the run.
		e.met.claimedOnEnqueue.Inc()
		e.notify(Event{Kind: EventRunStarted, RunID: run.ID, ItemID: run.ItemID, SessionID: run.SessionID, Status: run.Status})
		e.handToWorker(ctx, run)
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.ItemID.String(it.ID), tracing.SessionID.String(it.SessionID), tracing.Enqueued.Bool(created),
			tracing.Surface.String(tracing.SurfaceOf(p.OwnerUID, origin)))
	}
	if created && run == nil {
		e.signal()
	}
	if created {
		e.log.DebugContext(ctx, "enqueued", slog.String("item_id", it.ID), slog.String("command", it.Command))
	}
	return it, created, nil
}

// insert writes the item. When a worker of this process is waiting, the
// item is inserted already claimed, its run created with its run_started
// line in the same transaction, and the run is handed to that worker: no
// claim statement, no wake-up round trip. The run is as durable and as
// fenced as a claimed one (a crash right after the enqueue leaves a running
// run that recovery takes over). A claimed insert that fails for any reason
// but the caller's cancellation is tried again as a plain one, so claiming
// on enqueue can never refuse an item a plain enqueue would take.
func (e *Engine) insert(ctx context.Context, ip *store.QueueItemInsertParams) (*store.QueueItem, *store.Run, bool, error) {
	if !e.claims.ready(e.cfg.Now()) || !e.reserveWorker() {
		it, created, err := e.store.QueueItemInsert(ctx, ip)
		return it, nil, created, err
	}
	runID := store.RunIDForItem(ip.ID)
	it, run, created, err := e.store.QueueItemInsertClaimed(ctx, ip, &store.ItemInsertClaim{RunID: runID,
		RunnerID: e.cfg.RunnerID, Now: e.cfg.Now(), Events: []store.EventAppendParams{transcript.Encode(
			transcript.RunStarted{RunID: runID, ItemID: ip.ID, Command: ip.Command, DedupeKey: ip.DedupeKey}, "engine")}})
	if run == nil {
		e.unreserveWorker()
	}
	if err != nil && ctx.Err() == nil {
		e.log.WarnContext(ctx, "claim on enqueue failed; enqueuing as pending", slog.String("item_id", ip.ID), slog.Any("error", err))
		it, created, err = e.store.QueueItemInsert(ctx, ip)
	}
	return it, run, created, err
}

// checkEnqueue applies the input rules of SPEC §7 to an item before anything
// is read: the dedupe key is a name, every payload string is UTF-8 without
// NUL, the payload's title and tags (which dispatch gives the memo) are
// within the memo limits, and payload.targetMemoId, when present, is an id.
// titled gives a payload with a brief and no title the brief's first line
// as its title (at most 80 characters), as every surface's item should
// have: a drafting workflow's prompt heads its memo with payload.title, and
// holds and runs are named by it. The caller's map is not changed.
func titled(payload map[string]any) map[string]any {
	brief, _ := payload["brief"].(string)
	if t, _ := payload["title"].(string); strings.TrimSpace(t) != "" || strings.TrimSpace(brief) == "" {
		return payload
	}
	line, _, _ := strings.Cut(strings.TrimSpace(brief), "\n")
	// A title is text: the line's markup is read rather than kept, so
	// cutting it can never leave a bold or a link open on a card.
	line = strings.TrimSpace(workflow.PlainText([]byte(line)))
	if r := []rune(line); len(r) > 80 {
		cut := string(r[:80])
		if i := strings.LastIndexFunc(cut, unicode.IsSpace); i > 40 {
			cut = cut[:i] // between words, when a word boundary is near
		}
		line = strings.TrimSpace(cut) + "…"
	}
	if line == "" {
		return payload
	}
	out := maps.Clone(payload)
	out["title"] = line
	return out
}

func checkEnqueue(p EnqueueParams) error {
	if err := store.CheckName("dedupeKey", p.DedupeKey); err != nil {
		return err
	}
	if err := store.CheckName("sessionId", p.SessionID); err != nil {
		return err
	}
	if err := store.CheckValue("payload", p.Payload); err != nil {
		return err
	}
	if t, ok := p.Payload["title"].(string); ok {
		if err := store.CheckName("payload.title", t); err != nil {
			return err
		}
	}
	if tags, ok := p.Payload["tags"].([]any); ok && len(tags) > store.MaxTags {
		return fmt.Errorf("%w: payload.tags has %d tags, more than %d", store.ErrInvalid, len(tags), store.MaxTags)
	}
	for _, t := range stringsOf(p.Payload["tags"]) {
		if err := store.CheckName("payload.tags", t); err != nil {
			return err
		}
	}
	switch v := p.Payload["targetMemoId"].(type) {
	case nil, string:
	default:
		return store.Refuse(store.ErrInvalid, "payload.targetMemoId must be a memo id (a string), got %T", v)
	}
	return nil
}

func stringsOf(v any) []string {
	var out []string
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	case []string:
		out = v
	}
	return out
}
