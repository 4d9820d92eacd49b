package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
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

// Enqueue adds an item to the workflow's queue, idempotently on (workflow,
// DedupeKey): a repeat answers the existing item and false. An unknown
// command wraps store.ErrNotFound, a workflow that is not live
// store.ErrConflict. Routing reads only the workflow index: nothing is
// compiled here. A new item wakes the runner at once.
func (e *Engine) Enqueue(ctx context.Context, p EnqueueParams) (_ *store.QueueItem, _ bool, err error) {
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
		return nil, false, fmt.Errorf("%w: workflow %s does not compile (line %d: %s), so it is not live and accepts no items",
			store.ErrConflict, cmd, w.Errors[0].Line, w.Errors[0].Message)
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
		if m, err := e.store.MemoGetByID(ctx, target); err == nil {
			ip.TargetVersion = m.ContentVersion
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, false, err
		}
	}
	origin := store.OriginWorkflow
	if p.SessionID == "" {
		// Items enqueued with no session follow the workflow's own policy,
		// which is what posture auto means.
		ip.NewSession = &store.SessionCreateParams{Title: w.Title, Origin: store.OriginWorkflow, Policy: "auto",
			CallerUser: p.OwnerUID, Context: map[string]any{"command": w.Command}}
	} else if ses, err := e.store.SessionGetByID(ctx, p.SessionID); err != nil {
		return nil, false, err
	} else {
		origin = ses.Origin
	}
	it, created, err := e.store.QueueItemInsert(ctx, ip)
	if err != nil {
		return nil, false, err
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.ItemID.String(it.ID), tracing.SessionID.String(it.SessionID), tracing.Enqueued.Bool(created),
			tracing.Surface.String(tracing.SurfaceOf(p.OwnerUID, origin)))
	}
	if created {
		e.signal()
		e.log.DebugContext(ctx, "enqueued", slog.String("item_id", it.ID), slog.String("command", it.Command))
	}
	return it, created, nil
}
