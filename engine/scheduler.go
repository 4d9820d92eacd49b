package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// scheduleRescan bounds how long a new or edited schedule goes unnoticed.
const scheduleRescan = time.Minute

type scheduled struct {
	command string
	sched   *workflow.Schedule
	since   time.Time // the workflow memo's creation
}

// schedule enqueues schedule-Invoke workflows at each slot, with the slot
// time (RFC 3339) as the dedupe key: every replica and every restart agrees
// on the key, so a slot is enqueued once. At start the latest slot at or
// before now is enqueued, which catches a slot missed while down, unless
// that slot predates the workflow: a fresh install does not owe last
// Monday's digest.
func (e *Engine) schedule(ctx context.Context) {
	first := true
	for {
		list, err := e.schedules(ctx)
		if err != nil {
			e.logErr(ctx, "listing scheduled workflows", err)
		}
		now := e.cfg.Now()
		next := now.Add(scheduleRescan)
		for _, s := range list {
			if prev := s.sched.Prev(now); first && prev.After(s.since) {
				e.enqueueSlot(ctx, s, prev)
			}
			if n := s.sched.Next(now); !n.IsZero() && n.Before(next) {
				next = n
			}
		}
		first = false
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now = e.cfg.Now()
		for _, s := range list {
			if slot := s.sched.Prev(now); !slot.IsZero() && !slot.Before(next) {
				e.enqueueSlot(ctx, s, slot)
			}
		}
	}
}

func (e *Engine) enqueueSlot(ctx context.Context, s scheduled, slot time.Time) {
	if slot.IsZero() {
		return
	}
	key := slot.UTC().Format(time.RFC3339)
	_, created, err := e.Enqueue(ctx, EnqueueParams{Command: s.command, DedupeKey: key, OwnerUID: "engine",
		Payload: map[string]any{"slot": key}})
	switch {
	case err != nil && !errors.Is(err, store.ErrConflict):
		e.logErr(ctx, "enqueueing a scheduled slot", err)
	case created:
		e.log.InfoContext(ctx, "enqueued scheduled slot", slog.String("command", s.command), slog.String("slot", key))
	}
}

// schedules compiles the live workflows whose Invoke is a schedule.
func (e *Engine) schedules(ctx context.Context) ([]scheduled, error) {
	ws, err := e.store.WorkflowList(ctx)
	if err != nil {
		return nil, err
	}
	var out []scheduled
	for _, w := range ws {
		if w.Status != workflow.StatusLive || w.Invoke == "" || w.Command == "" {
			continue
		}
		memo, err := e.store.MemoGetByID(ctx, w.MemoID)
		if err != nil {
			continue
		}
		m, errs := workflow.Compile([]byte(memo.Body), workflow.Options{})
		if len(errs) > 0 || m.Schedule == nil {
			continue
		}
		out = append(out, scheduled{command: m.Command, sched: m.Schedule, since: memo.CreatedAt})
	}
	return out, nil
}
