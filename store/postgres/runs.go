package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// Runs are read joined with their item for the payload and stub version.
const runColumns = `r.id, r.item_id, r.workflow_memo_id, r.command, r.session_id, r.owner_uid, i.payload, i.target_version,
	i.trace_context, r.status, r.manifest, r.steps, r.state, r.guards, r.error_kind, r.error, r.hold_id, r.decision,
	r.decided_output, r.dispatch_memo_id, r.model, r.tokens_in, r.tokens_out, r.lease, r.runner_id, r.heartbeat_at, r.recovery_attempts, r.created_at, r.updated_at, r.finished_at`

const runFrom = ` FROM workflow_runs r JOIN workflow_queue_items i ON i.id = r.item_id`

func scanRun(row scanner) (*store.Run, error) {
	var (
		r                                       store.Run
		payload, manifest, steps, state, guards string
	)
	if err := row.Scan(&r.ID, &r.ItemID, &r.WorkflowMemoID, &r.Command, &r.SessionID, &r.OwnerUID, &payload, &r.TargetVersion,
		&r.TraceContext, &r.Status, &manifest, &steps, &state, &guards, &r.ErrorKind, &r.Error, &r.HoldID, &r.Decision,
		&r.DecidedOutput, &r.DispatchMemoID, &r.Model, &r.TokensIn, &r.TokensOut, &r.Lease, &r.RunnerID, &r.HeartbeatAt, &r.RecoveryAttempts, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt); err != nil {
		return nil, interpretError(err)
	}
	r.Payload = decodeMap(payload)
	r.Manifest, r.State, r.Guards = json.RawMessage(manifest), json.RawMessage(state), json.RawMessage(guards)
	r.Steps = []store.RunStep{}
	_ = json.Unmarshal([]byte(steps), &r.Steps)
	return &r, nil
}

func runGet(ctx context.Context, q querier, id string) (*store.Run, error) {
	return scanRun(q.QueryRow(ctx, `SELECT `+runColumns+runFrom+` WHERE r.id = $1`, id))
}

// RunGetByID reads one run.
func (db *DB) RunGetByID(ctx context.Context, id string) (*store.Run, error) {
	r, err := runGet(ctx, db.pool, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return r, nil
}

// RunCountByStatus counts runs per status (for metrics).
func (db *DB) RunCountByStatus(ctx context.Context) (map[string]int64, error) {
	return db.countBy(ctx, `SELECT status, COUNT(*) FROM workflow_runs GROUP BY status`,
		store.RunRunning, store.RunSuspended, store.RunSucceeded, store.RunFailed, store.RunCancelled, store.RunRecoveryExhausted)
}

// fenced is what a runner write needs to know about the run it fences.
type fenced struct {
	id, itemID, sessionID string
}

// rawArg passes JSON to a COALESCE($n, column) update: nil keeps the column.
func rawArg(raw json.RawMessage) *string {
	if raw == nil {
		return nil
	}
	s := string(raw)
	return &s
}

// usageArgs passes a run's usage to COALESCE($n, column) updates: nil keeps
// the columns.
func usageArgs(u *store.RunUsage) (model *string, tokensIn, tokensOut *int64) {
	if u == nil {
		return nil, nil, nil
	}
	return &u.Model, &u.TokensIn, &u.TokensOut
}

func stepsArg(steps []store.RunStep) *string {
	if steps == nil {
		return nil
	}
	s := encodeJSON(steps)
	return &s
}

// checkpointTx is the fence and the write in one statement: the run is
// written only while this runner holds it (running at its lease).
func checkpointTx(ctx context.Context, tx *txn, p *store.RunCheckpointParams, status string) (*fenced, error) {
	now := utc(nowOr(p.Now))
	f := &fenced{id: p.RunID}
	model, tin, tout := usageArgs(p.Usage)
	err := tx.QueryRow(ctx, `UPDATE workflow_runs SET status = $1, manifest = COALESCE($2, manifest),
		steps = COALESCE($3, steps), state = COALESCE($4, state), guards = COALESCE($5, guards),
		model = COALESCE($9, model), tokens_in = COALESCE($10, tokens_in), tokens_out = COALESCE($11, tokens_out),
		heartbeat_at = $6, updated_at = $6 WHERE id = $7 AND lease = $8 AND status = 'running'
		RETURNING item_id, session_id`,
		status, rawArg(p.Manifest), stepsArg(p.Steps), rawArg(p.State), rawArg(p.Guards), now, p.RunID, p.Lease, model, tin, tout).
		Scan(&f.itemID, &f.sessionID)
	if isNoRows(err) {
		return nil, leaseLost(ctx, tx, p.RunID, p.Lease)
	}
	if err != nil {
		return nil, err
	}
	if err := appendEventList(ctx, tx, f.sessionID, p.Events); err != nil {
		return nil, err
	}
	return f, nil
}

// leaseLost explains a fenced-off write: ErrNotFound for a run that does
// not exist, else ErrLeaseLost with the run as it is.
func leaseLost(ctx context.Context, tx *txn, runID string, lease int64) error {
	var (
		status string
		cur    int64
	)
	err := tx.QueryRow(ctx, `SELECT status, lease FROM workflow_runs WHERE id = $1`, runID).Scan(&status, &cur)
	if err != nil {
		return interpretError(err)
	}
	return fmt.Errorf("%w: run %s is %s at lease %d, writer holds lease %d", store.ErrLeaseLost, runID, status, cur, lease)
}

// RunCheckpoint records progress and refreshes the heartbeat.
func (db *DB) RunCheckpoint(ctx context.Context, p *store.RunCheckpointParams) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		_, err := checkpointTx(ctx, tx, p, store.RunRunning)
		return err
	})
	if err != nil {
		return fmt.Errorf("run checkpoint %s: %w", p.RunID, err)
	}
	return nil
}

// RunHeartbeat refreshes only the heartbeat, for long steps, and answers the
// run's cancel request.
func (db *DB) RunHeartbeat(ctx context.Context, runID string, lease int64, now time.Time) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("run heartbeat %s: %w", runID, err)
	}
	var cancel string
	err := db.pool.QueryRow(context.WithoutCancel(ctx), `UPDATE workflow_runs SET heartbeat_at = $1
		WHERE id = $2 AND lease = $3 AND status = 'running' RETURNING cancel_requested`, utc(nowOr(now)), runID, lease).Scan(&cancel)
	if isNoRows(err) {
		return "", fmt.Errorf("run heartbeat %s: %w", runID, store.ErrLeaseLost)
	}
	if err != nil {
		return "", fmt.Errorf("run heartbeat %s: %w", runID, interpretError(err))
	}
	return cancel, nil
}

// RunCancelRequest stamps a cancel request on running runs and tells every
// replica at commit, so the one running them cancels at once instead of at
// its next heartbeat.
func (db *DB) RunCancelRequest(ctx context.Context, runIDs []string, reason string) error {
	if len(runIDs) == 0 {
		return nil
	}
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		ids, err := queryAll(ctx, tx, scanString, `UPDATE workflow_runs SET cancel_requested = $1
			WHERE id = ANY ($2) AND status = 'running' AND cancel_requested = '' RETURNING id`, reason, runIDs)
		if err != nil {
			return err
		}
		for _, n := range cancelNotices(ids, reason) {
			tx.notifyWork(n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("run cancel request: %w", err)
	}
	return nil
}

func scanString(row scanner) (string, error) {
	var s string
	return s, row.Scan(&s)
}

// RunSuspend checkpoints the run, opens its hold and suspends it, together.
func (db *DB) RunSuspend(ctx context.Context, p *store.RunSuspendParams) (*store.Hold, error) {
	var h *store.Hold
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		if _, err := checkpointTx(ctx, tx, &p.RunCheckpointParams, store.RunSuspended); err != nil {
			return err
		}
		hp := p.Hold
		now := utc(nowOr(p.Now))
		var err error
		h, err = scanHold(tx.QueryRow(ctx, `WITH ins AS (
				INSERT INTO holds (id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status,
					preview, output, required_approvals, self_approval, expires_at, on_timeout, created_at,
					title, remind_every_ms, remind_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) RETURNING *),
			-- A run held again (its output's review after a Token budget
			-- hold) starts its new hold undecided.
			upd AS (UPDATE workflow_runs SET hold_id = $1, decision = '', decided_output = NULL WHERE id = $2)
			SELECT `+holdColumns+` FROM ins`,
			hp.ID, p.RunID, hp.ItemID, hp.SessionID, hp.OwnerUID, hp.Command, hp.WorkflowName, hp.GateLabel,
			hp.Preview, hp.Output, max(hp.RequiredApprovals, 1), hp.SelfApproval, hp.ExpiresAt, hp.OnTimeout, now,
			hp.Title, hp.RemindEvery.Milliseconds(), hp.RemindAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("run suspend %s: %w", p.RunID, err)
	}
	return h, nil
}

// RunSettle ends a run; a memo dispatch commits with it or not at all.
func (db *DB) RunSettle(ctx context.Context, p *store.RunSettleParams) (*store.Run, error) {
	var out *store.Run
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		now := utc(nowOr(p.Now))
		memoID := ""
		if d := p.Dispatch; d != nil {
			memoID = d.MemoID
			if d.Update != nil {
				memoID = d.Update.ID
			}
			if memoID == "" {
				return fmt.Errorf("%w: a dispatch needs its memo id", store.ErrInvalid)
			}
		}
		cur, err := settleRunTx(ctx, tx, p.RunID, &p.Lease, p.Status, p.ErrorKind, p.Error,
			p.Manifest, p.Steps, p.State, p.Guards, p.Usage, memoID, now)
		if err != nil {
			return err
		}
		if d := p.Dispatch; d != nil {
			if _, err = dispatchTx(ctx, tx, d, memoID); err != nil {
				return err
			}
		}
		settleItemTx(tx, cur.itemID, p.Status, p.ItemStatus, now)
		out = &store.Run{ID: cur.id, ItemID: cur.itemID, SessionID: cur.sessionID, Status: p.Status, ErrorKind: p.ErrorKind,
			Error: p.Error, Steps: p.Steps, DispatchMemoID: memoID, FinishedAt: &now, UpdatedAt: now}
		if p.Usage != nil {
			out.Model, out.TokensIn, out.TokensOut = p.Usage.Model, p.Usage.TokensIn, p.Usage.TokensOut
		}
		return appendEventList(ctx, tx, cur.sessionID, p.Events)
	})
	if err != nil {
		return nil, fmt.Errorf("run settle %s: %w", p.RunID, err)
	}
	return out, nil
}

// settleRunTx writes a run's final state. With lease set it is also the
// fence: a run this writer no longer holds is ErrLeaseLost.
func settleRunTx(ctx context.Context, tx *txn, runID string, lease *int64, status, errKind, errMsg string,
	manifest json.RawMessage, steps []store.RunStep, state, guards json.RawMessage, usage *store.RunUsage, memoID string,
	now time.Time) (*fenced, error) {
	model, tin, tout := usageArgs(usage)
	q := `UPDATE workflow_runs SET status = $1, error_kind = $2, error = $3,
		manifest = COALESCE($4, manifest), steps = COALESCE($5, steps), state = COALESCE($6, state), guards = COALESCE($7, guards),
		model = COALESCE($11, model), tokens_in = COALESCE($12, tokens_in), tokens_out = COALESCE($13, tokens_out),
		dispatch_memo_id = CASE WHEN $8 = '' THEN dispatch_memo_id ELSE $8 END, lease = lease + 1,
		heartbeat_at = $9, updated_at = $9, finished_at = $9 WHERE id = $10`
	args := []any{status, errKind, errMsg, rawArg(manifest), stepsArg(steps), rawArg(state), rawArg(guards), memoID, now, runID,
		model, tin, tout}
	if lease != nil {
		q += ` AND lease = $14 AND status = 'running'`
		args = append(args, *lease)
	}
	f := &fenced{id: runID}
	err := tx.QueryRow(ctx, q+` RETURNING item_id, session_id`, args...).Scan(&f.itemID, &f.sessionID)
	if isNoRows(err) {
		if lease == nil {
			return nil, fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
		}
		return nil, fmt.Errorf("%w: run %s is no longer held at lease %d", store.ErrLeaseLost, runID, *lease)
	}
	return f, err
}

func settleItemTx(tx *txn, itemID, status, itemStatus string, now time.Time) {
	if itemStatus == "" {
		itemStatus = store.ItemFailed
		if status == store.RunSucceeded {
			itemStatus = store.ItemDone
		}
	}
	// Sent with the transaction's next statement.
	tx.later(nil, `UPDATE workflow_queue_items SET status = $1, settled_at = $2 WHERE id = $3`, itemStatus, now, itemID)
}

// dispatchTx writes the run's memo. The move guard and the stub's
// compare-and-set both answer ErrConflict, which rolls back the settle.
func dispatchTx(ctx context.Context, tx *txn, d *store.DispatchParams, newID string) (*store.Memo, error) {
	if g := d.MoveGuard; g != nil {
		src, err := memoGet(ctx, tx, g.MemoID, true)
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: source memo %s no longer exists", store.ErrConflict, g.MemoID)
		} else if err != nil {
			return nil, err
		}
		if g.ContentHash != "" && src.ContentHash != g.ContentHash {
			return nil, fmt.Errorf("%w: source memo %s changed since enqueue (content hash differs)", store.ErrConflict, g.MemoID)
		}
		if g.NotesHash != "" && store.HashContent(src.Notes) != g.NotesHash {
			return nil, fmt.Errorf("%w: source memo %s changed since enqueue (notes hash differs)", store.ErrConflict, g.MemoID)
		}
	}
	switch {
	case d.Update != nil:
		m, err := memoUpdateTx(ctx, tx, d.Update)
		if isNotFound(err) {
			return nil, fmt.Errorf("target memo %s: %w", d.Update.ID, err)
		}
		return m, err
	case d.Create != nil:
		return memoCreateTx(ctx, tx, newID, d.Create)
	}
	return nil, nil
}

// RunResumeApproved takes over approved suspended runs, oldest decision
// first; SKIP LOCKED lets replicas resume different runs at once.
func (db *DB) RunResumeApproved(ctx context.Context, p *store.RunAcquireParams) ([]*store.Run, error) {
	var out []*store.Run
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		now := utc(nowOr(p.Now))
		var err error
		out, err = queryAll(ctx, tx, scanRun, `WITH chosen AS (
				SELECT id FROM workflow_runs WHERE status = 'suspended' AND decision = 'approved'
				ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED),
			r AS (UPDATE workflow_runs w SET status = 'running', lease = w.lease + 1, runner_id = $1, heartbeat_at = $2, updated_at = $2
				FROM chosen WHERE w.id = chosen.id RETURNING w.*)
			SELECT `+runColumns+` FROM r JOIN workflow_queue_items i ON i.id = r.item_id ORDER BY r.updated_at, r.id`,
			p.RunnerID, now, max(p.Limit, 1))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume approved: %w", err)
	}
	return out, nil
}

// RunListStuck lists stale running runs, stalest first.
func (db *DB) RunListStuck(ctx context.Context, staleBefore time.Time, limit int) ([]*store.Run, error) {
	out, err := queryAll(ctx, db.pool, scanRun, `SELECT `+runColumns+runFrom+`
		WHERE r.status = 'running' AND r.heartbeat_at < $1 ORDER BY r.heartbeat_at LIMIT $2`, staleBefore, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("stuck runs: %w", err)
	}
	return out, nil
}

// RunRescueMany takes over or settles the stuck runs the engine chose, each
// only while it is still running at the lease read with a stale heartbeat.
func (db *DB) RunRescueMany(ctx context.Context, p *store.RunRescueParams) (recovered, exhausted []*store.Run, err error) {
	err = db.tx(ctx, func(ctx context.Context, tx *txn) error {
		recovered, exhausted = nil, nil
		now := utc(nowOr(p.Now))
		for _, r := range p.Recover {
			tag, err := tx.Exec(ctx, `UPDATE workflow_runs SET lease = lease + 1, runner_id = $1, heartbeat_at = $2,
				updated_at = $2, recovery_attempts = recovery_attempts + 1
				WHERE id = $3 AND lease = $4 AND status = 'running' AND heartbeat_at < $5`,
				p.RunnerID, now, r.ID, r.Lease, p.StaleBefore)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			got, err := runGet(ctx, tx, r.ID)
			if err != nil {
				return err
			}
			recovered = append(recovered, got)
		}
		for _, x := range p.Exhaust {
			var itemID, sessionID string
			err := tx.QueryRow(ctx, `UPDATE workflow_runs SET status = $1, error_kind = $2, error = $3, lease = lease + 1,
				heartbeat_at = $4, updated_at = $4, finished_at = $4
				WHERE id = $5 AND lease = $6 AND status = 'running' AND heartbeat_at < $7 RETURNING item_id, session_id`,
				x.Outcome.Status, x.Outcome.ErrorKind, x.Outcome.Error, now, x.ID, x.Lease, p.StaleBefore).Scan(&itemID, &sessionID)
			if isNoRows(err) {
				continue
			} else if err != nil {
				return err
			}
			settleItemTx(tx, itemID, x.Outcome.Status, x.Outcome.ItemStatus, now)
			if err := appendEventList(ctx, tx, sessionID, x.Events); err != nil {
				return err
			}
			got, err := runGet(ctx, tx, x.ID)
			if err != nil {
				return err
			}
			exhausted = append(exhausted, got)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("rescue stuck runs: %w", err)
	}
	return recovered, exhausted, nil
}
