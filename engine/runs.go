package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// maxReruns bounds the re-runs of one run (each takes the next dedupe key).
const maxReruns = 100

// cancelWait is how long CancelRun waits for a running run on this process
// to settle after its context is cancelled.
const cancelWait = 5 * time.Second

// Rerun enqueues a settled run's payload again for its workflow, in its
// session, as by (SPEC §6, §7): dedupe key "rerun:<runId>:<n>", n counting
// the run's re-runs from 1. Only stewards may; a run that has not settled is
// a conflict (cancel it first). Enqueue's rules apply (a workflow that is no
// longer live refuses).
func (e *Engine) Rerun(ctx context.Context, runID string, by Decider) (*store.QueueItem, error) {
	rights, err := e.RightsOf(ctx, by)
	if err != nil {
		return nil, err
	}
	if !rights.Steward() {
		return nil, store.Refuse(store.ErrForbidden, "%s is not a steward; only stewards may re-run workflow runs", rights.name)
	}
	run, err := e.store.RunGetByID(ctx, runID)
	if err != nil {
		return nil, err
	}
	if !run.Settled() {
		return nil, store.Refuse(store.ErrConflict, "run %s is still %s; re-run it once it has finished, or cancel it first", run.ID, run.Status)
	}
	for n := 1; n <= maxReruns; n++ {
		it, created, err := e.Enqueue(ctx, EnqueueParams{Command: run.Command, DedupeKey: fmt.Sprintf("rerun:%s:%d", run.ID, n),
			Payload: run.Payload, SessionID: run.SessionID, OwnerUID: rights.d.UID()})
		if err != nil {
			return nil, err
		}
		if created {
			e.log.InfoContext(ctx, "run re-run", slog.String("run_id", run.ID), slog.String("item_id", it.ID), slog.String("by", rights.name))
			return it, nil
		}
	}
	return nil, store.Refuse(store.ErrConflict, "run %s was already re-run %d times", run.ID, maxReruns)
}

// CancelRun stops a run as by (SPEC §6, §7; stewards only). A running run's
// model call is cancelled and it settles cancelled (the same mechanism as
// /terminate: CancelSessionRuns); a run suspended at an open hold is rejected
// through Decide, as a decision like any other (audited, its card updated).
// It answers the run as it is after the cancel (a run executing on this
// process is waited for, briefly). A settled run is a conflict.
func (e *Engine) CancelRun(ctx context.Context, runID string, by Decider) (*store.Run, error) {
	rights, err := e.RightsOf(ctx, by)
	if err != nil {
		return nil, err
	}
	if !rights.Steward() {
		return nil, store.Refuse(store.ErrForbidden, "%s is not a steward; only stewards may cancel workflow runs", rights.name)
	}
	run, err := e.store.RunGetByID(ctx, runID)
	if err != nil {
		return nil, err
	}
	if run.Settled() {
		return nil, store.Refuse(store.ErrConflict, "run %s already %s; there is nothing to cancel", run.ID, run.Status)
	}
	if run.Status == store.RunSuspended && run.HoldID != "" && run.Decision == "" {
		_, err := e.Decide(ctx, DecideParams{HoldID: run.HoldID, Decision: "reject", Comment: "cancelled", Decider: by})
		if err == nil || !errors.Is(err, store.ErrConflict) {
			if err != nil {
				return nil, err
			}
			return e.store.RunGetByID(ctx, runID)
		}
		// Decided meanwhile: approved, it is about to resume; cancel that.
		if run, err = e.store.RunGetByID(ctx, runID); err != nil {
			return nil, err
		}
		if run.Settled() {
			return nil, store.Refuse(store.ErrConflict, "run %s already %s; there is nothing to cancel", run.ID, run.Status)
		}
	}
	if err := e.store.RunCancelRequest(ctx, []string{run.ID}, rights.name); err != nil {
		return nil, err
	}
	cause := fmt.Errorf("%w by %s", errRunCancelled, rights.name)
	if done := e.cancelRunning(run, cause); done != nil {
		wait := time.NewTimer(cancelWait)
		defer wait.Stop()
		select {
		case <-done:
		case <-wait.C:
		case <-ctx.Done():
		}
	}
	e.log.InfoContext(ctx, "run cancel requested", slog.String("run_id", run.ID), slog.String("by", rights.name))
	return e.store.RunGetByID(context.WithoutCancel(ctx), runID)
}
