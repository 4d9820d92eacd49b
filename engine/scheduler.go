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

// maxCatchUp bounds the slots one schedule enqueues at once (a clock jump,
// a long stall): the rest are skipped, not owed.
const maxCatchUp = 64

// schedule enqueues schedule-Invoke workflows at each slot, with the slot
// time (RFC 3339) as the dedupe key: every replica and every restart agrees
// on the key, so a slot is enqueued once however many try. It runs only on
// the leader (see Lead). At start the latest slot at or before now is
// enqueued, which catches a slot missed while down, unless that slot
// predates the workflow: a fresh install does not owe last Monday's digest.
// An electing replica that becomes leader also owes every slot since its
// predecessor may have stopped (the takeover bound), so a slot falling in a
// change of leader is neither lost nor doubled. Slots are enqueued in order
// and none is skipped when a wake-up comes late.
func (e *Engine) schedule(ctx context.Context) {
	first := true
	var (
		list     []scheduled
		rescanAt time.Time
		done     = map[string]time.Time{} // command → its slots up to here are enqueued
	)
	for {
		now := e.cfg.Now()
		if !now.Before(rescanAt) {
			var err error
			if list, err = e.schedules(ctx); err != nil {
				e.logErr(ctx, "listing scheduled workflows", err)
			}
			rescanAt = now.Add(scheduleRescan)
			for _, s := range list {
				if _, seen := done[s.command]; seen {
					continue
				}
				from := now // a schedule added while running owes nothing yet
				if first {
					if e.cfg.Elect {
						from = now.Add(-e.cfg.takeover())
					}
					if prev := s.sched.Prev(now); !prev.After(from) && prev.After(s.since) {
						e.enqueueSlot(ctx, s, prev)
					}
				}
				done[s.command] = from
			}
			first = false
		}
		next := rescanAt
		for _, s := range list {
			done[s.command] = e.enqueueDue(ctx, s, done[s.command], now)
			if n := s.sched.Next(now); !n.IsZero() && n.Before(next) {
				next = n
			}
		}
		t := time.NewTimer(next.Sub(e.cfg.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// enqueueDue enqueues s's slots after from up to now, and answers now.
func (e *Engine) enqueueDue(ctx context.Context, s scheduled, from, now time.Time) time.Time {
	n := 0
	for slot := s.sched.Next(from); !slot.IsZero() && !slot.After(now) && n < maxCatchUp; slot = s.sched.Next(slot) {
		if slot.After(s.since) {
			e.enqueueSlot(ctx, s, slot)
			n++
		}
	}
	return now
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
