package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// Runs are read joined with their item for the payload and stub version.
const runColumns = `r.id, r.item_id, r.workflow_memo_id, r.command, r.session_id, r.owner_uid, i.payload, i.target_version,
	i.trace_context, r.status, r.manifest, r.steps, r.state, r.guards, r.error_kind, r.error, r.hold_id, r.decision, r.decided_output,
	r.dispatch_memo_id, r.model, r.tokens_in, r.tokens_out, r.lease, r.runner_id, r.heartbeat_at, r.recovery_attempts,
	r.created_at, r.updated_at, r.finished_at`

const (
	runFrom          = ` FROM workflow_runs r JOIN workflow_queue_items i ON i.id = r.item_id`
	runFromBySession = ` FROM workflow_runs r INDEXED BY runs_session JOIN workflow_queue_items i ON i.id = r.item_id`
)

func scanRun(row scanner) (*store.Run, error) {
	var (
		r                                  store.Run
		payload, manifest, steps, state    string
		guards, heartbeat, created, update string
		decided                            sql.NullString
		finished                           sql.NullString
	)
	if err := row.Scan(&r.ID, &r.ItemID, &r.WorkflowMemoID, &r.Command, &r.SessionID, &r.OwnerUID, &payload, &r.TargetVersion,
		&r.TraceContext, &r.Status, &manifest, &steps, &state, &guards, &r.ErrorKind, &r.Error, &r.HoldID, &r.Decision, &decided,
		&r.DispatchMemoID, &r.Model, &r.TokensIn, &r.TokensOut, &r.Lease, &r.RunnerID, &heartbeat, &r.RecoveryAttempts,
		&created, &update, &finished); err != nil {
		return nil, interpretError(err)
	}
	r.Payload = decodeMap(payload)
	r.Manifest, r.State, r.Guards = json.RawMessage(manifest), json.RawMessage(state), json.RawMessage(guards)
	r.Steps = []store.RunStep{}
	_ = json.Unmarshal([]byte(steps), &r.Steps)
	if decided.Valid {
		s := decided.String
		r.DecidedOutput = &s
	}
	r.HeartbeatAt, r.CreatedAt, r.UpdatedAt = parseTime(heartbeat), parseTime(created), parseTime(update)
	r.FinishedAt = nullTime(finished)
	return &r, nil
}

func runGet(ctx context.Context, q queryRower, id string) (*store.Run, error) {
	return scanRun(q.QueryRowContext(ctx, `SELECT `+runColumns+runFrom+` WHERE r.id = ?`, id))
}

// RunGetByID reads one run.
func (db *DB) RunGetByID(ctx context.Context, id string) (*store.Run, error) {
	r, err := runGet(ctx, db.r, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return r, nil
}

// RunList lists runs newest first under p's filters, from p.After on. Pages
// order by (created_at, id) so ties never repeat or skip a run; every index a
// listing walks ends in those columns (runListQuery), and a text filter is
// answered from the trigram index (runSearchList).
func (db *DB) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	var (
		out []*store.Run
		err error
	)
	if q := runQueryText(p.Query); trigramSearchable(q) {
		out, err = db.runSearchList(ctx, p, q)
	} else {
		query, args := runListQuery(p)
		out, err = queryAll(ctx, db.r, scanRun, query, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("run list: %w", err)
	}
	return out, nil
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

// fence checks that the caller still holds the run; every runner write goes
// through it, so a runner whose run was recovered elsewhere stops writing.
func fence(ctx context.Context, tx *sql.Tx, runID string, lease int64) (*fenced, error) {
	var (
		f      = &fenced{id: runID}
		status string
		cur    int64
	)
	err := tx.QueryRowContext(ctx, `SELECT item_id, session_id, status, lease FROM workflow_runs WHERE id = ?`, runID).
		Scan(&f.itemID, &f.sessionID, &status, &cur)
	if err != nil {
		return nil, interpretError(err)
	}
	if cur != lease || status != store.RunRunning {
		return nil, fmt.Errorf("%w: run %s is %s at lease %d, writer holds lease %d", store.ErrLeaseLost, runID, status, cur, lease)
	}
	return f, nil
}

// rawArg passes JSON to a COALESCE(?, column) update: nil keeps the column.
func rawArg(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

func stepsArg(steps []store.RunStep) any {
	if steps == nil {
		return nil
	}
	return encodeJSON(steps)
}

// usageArgs passes a run's usage to COALESCE(?, column) updates: nil keeps
// the columns.
func usageArgs(u *store.RunUsage) (model, tokensIn, tokensOut any) {
	if u == nil {
		return nil, nil, nil
	}
	return u.Model, u.TokensIn, u.TokensOut
}

func checkpointTx(ctx context.Context, tx *sql.Tx, p *store.RunCheckpointParams, status string) (*fenced, error) {
	cur, err := fence(ctx, tx, p.RunID, p.Lease)
	if err != nil {
		return nil, err
	}
	ts := formatTime(nowOr(p.Now))
	model, tin, tout := usageArgs(p.Usage)
	_, err = tx.ExecContext(ctx, `UPDATE workflow_runs SET status = ?, manifest = COALESCE(?, manifest),
		steps = COALESCE(?, steps), state = COALESCE(?, state), guards = COALESCE(?, guards),
		model = COALESCE(?, model), tokens_in = COALESCE(?, tokens_in), tokens_out = COALESCE(?, tokens_out),
		heartbeat_at = ?, updated_at = ? WHERE id = ?`,
		status, rawArg(p.Manifest), stepsArg(p.Steps), rawArg(p.State), rawArg(p.Guards), model, tin, tout, ts, ts, p.RunID)
	if err != nil {
		return nil, err
	}
	if err := appendEventList(ctx, tx, cur.sessionID, p.Events); err != nil {
		return nil, err
	}
	return cur, nil
}

// RunCheckpoint records progress and refreshes the heartbeat.
func (db *DB) RunCheckpoint(ctx context.Context, p *store.RunCheckpointParams) error {
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := checkpointTx(ctx, tx, p, store.RunRunning)
		return err
	})
	if err != nil {
		return fmt.Errorf("run checkpoint %s: %w", p.RunID, err)
	}
	return nil
}

// RunHeartbeat refreshes only the heartbeat, for long steps.
func (db *DB) RunHeartbeat(ctx context.Context, runID string, lease int64, now time.Time) (string, error) {
	var cancel string
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE workflow_runs SET heartbeat_at = ? WHERE id = ? AND lease = ? AND status = 'running'
			RETURNING cancel_requested`, formatTime(nowOr(now)), runID, lease).Scan(&cancel)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: run %s", store.ErrLeaseLost, runID)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("run heartbeat %s: %w", runID, err)
	}
	return cancel, nil
}

// RunCancelRequest stamps a cancel request on running runs.
func (db *DB) RunCancelRequest(ctx context.Context, runIDs []string, reason string) error {
	if len(runIDs) == 0 {
		return nil
	}
	args := []any{reason}
	for _, id := range runIDs {
		args = append(args, id)
	}
	var stamped []string
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		stamped, err = selectIDs(ctx, tx, `UPDATE workflow_runs SET cancel_requested = ?
			WHERE id IN (`+placeholders(len(runIDs))+`) AND status = 'running' AND cancel_requested = '' RETURNING id`, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("run cancel request: %w", err)
	}
	if len(stamped) > 0 {
		db.work.notify(store.WorkNotice{Kind: store.WorkCancel, RunIDs: stamped, Reason: reason})
	}
	return nil
}

// RunSuspend checkpoints the run, opens its hold and suspends it, together.
func (db *DB) RunSuspend(ctx context.Context, p *store.RunSuspendParams) (*store.Hold, error) {
	var h *store.Hold
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := checkpointTx(ctx, tx, &p.RunCheckpointParams, store.RunSuspended); err != nil {
			return err
		}
		hp := p.Hold
		ts := formatTime(nowOr(p.Now))
		if _, err := tx.ExecContext(ctx, `INSERT INTO holds (id, run_id, item_id, session_id, owner_uid, command,
			workflow_name, gate_label, status, preview, output, required_approvals, self_approval, expires_at, on_timeout, created_at,
			title, remind_every_ms, remind_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			hp.ID, p.RunID, hp.ItemID, hp.SessionID, hp.OwnerUID, hp.Command, hp.WorkflowName, hp.GateLabel,
			hp.Preview, hp.Output, max(hp.RequiredApprovals, 1), boolInt(hp.SelfApproval), nullTimeArg(hp.ExpiresAt),
			hp.OnTimeout, ts, hp.Title, hp.RemindEvery.Milliseconds(), nullTimeArg(hp.RemindAt)); err != nil {
			return err
		}
		// A run held again (its output's review after a Token budget hold)
		// starts its new hold undecided.
		if _, err := tx.ExecContext(ctx, `UPDATE workflow_runs SET hold_id = ?, decision = '', decided_output = NULL
			WHERE id = ?`, hp.ID, p.RunID); err != nil {
			return err
		}
		var err error
		h, err = holdGet(ctx, tx, hp.ID)
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
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := nowOr(p.Now)
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
		// The fence and the run's final write are one statement.
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
		if err := settleItemTx(ctx, tx, cur.itemID, p.Status, p.ItemStatus, now); err != nil {
			return err
		}
		// What the events need, without reading the row back.
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
func settleRunTx(ctx context.Context, tx *sql.Tx, runID string, lease *int64, status, errKind, errMsg string,
	manifest json.RawMessage, steps []store.RunStep, state, guards json.RawMessage, usage *store.RunUsage, memoID string,
	now time.Time) (*fenced, error) {
	ts := formatTime(now)
	model, tin, tout := usageArgs(usage)
	q := `UPDATE workflow_runs SET status = ?, error_kind = ?, error = ?,
		manifest = COALESCE(?, manifest), steps = COALESCE(?, steps), state = COALESCE(?, state), guards = COALESCE(?, guards),
		model = COALESCE(?, model), tokens_in = COALESCE(?, tokens_in), tokens_out = COALESCE(?, tokens_out),
		dispatch_memo_id = CASE WHEN ? = '' THEN dispatch_memo_id ELSE ? END, lease = lease + 1,
		heartbeat_at = ?, updated_at = ?, finished_at = ? WHERE id = ?`
	args := []any{status, errKind, errMsg, rawArg(manifest), stepsArg(steps), rawArg(state), rawArg(guards),
		model, tin, tout, memoID, memoID, ts, ts, ts, runID}
	if lease != nil {
		q += ` AND lease = ? AND status = 'running'`
		args = append(args, *lease)
	}
	f := &fenced{id: runID}
	err := tx.QueryRowContext(ctx, q+` RETURNING item_id, session_id`, args...).Scan(&f.itemID, &f.sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		if lease == nil {
			return nil, fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
		}
		return nil, fmt.Errorf("%w: run %s is no longer held at lease %d", store.ErrLeaseLost, runID, *lease)
	}
	return f, err
}

func settleItemTx(ctx context.Context, tx *sql.Tx, itemID, status, itemStatus string, now time.Time) error {
	if itemStatus == "" {
		itemStatus = store.ItemFailed
		if status == store.RunSucceeded {
			itemStatus = store.ItemDone
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE workflow_queue_items SET status = ?, settled_at = ? WHERE id = ?`, itemStatus, formatTime(now), itemID)
	return err
}

// settleTx settles a run the caller has already checked (recovery,
// decisions, cancellation), with its item.
func settleTx(ctx context.Context, tx *sql.Tx, runID, itemID, status, itemStatus, errKind, errMsg string,
	manifest json.RawMessage, steps []store.RunStep, state, guards json.RawMessage, memoID string, now time.Time) error {
	if _, err := settleRunTx(ctx, tx, runID, nil, status, errKind, errMsg, manifest, steps, state, guards, nil, memoID, now); err != nil {
		return err
	}
	return settleItemTx(ctx, tx, itemID, status, itemStatus, now)
}

// dispatchTx writes the run's memo. The move guard and the stub's
// compare-and-set both answer ErrConflict, which rolls back the settle.
func dispatchTx(ctx context.Context, tx *sql.Tx, d *store.DispatchParams, newID string) (*store.Memo, error) {
	if g := d.MoveGuard; g != nil {
		src, err := memoGet(ctx, tx, g.MemoID)
		if errors.Is(err, store.ErrNotFound) {
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
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("target memo %s: %w", d.Update.ID, err)
		}
		return m, err
	case d.Create != nil:
		return memoCreateTx(ctx, tx, newID, d.Create)
	}
	return nil, nil
}

// acquire stamps runs returned by sel (ids) as taken by runnerID and returns
// them re-read.
func acquireTx(ctx context.Context, tx *sql.Tx, ids []string, runnerID, ts string, extra string) ([]*store.Run, error) {
	var out []*store.Run
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `UPDATE workflow_runs SET status = 'running', lease = lease + 1, runner_id = ?,
			heartbeat_at = ?, updated_at = ?`+extra+` WHERE id = ?`, runnerID, ts, ts, id); err != nil {
			return nil, err
		}
		r, err := runGet(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func selectIDs(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

const (
	approvedRunsQuery = `SELECT id FROM workflow_runs INDEXED BY runs_approved
		WHERE status = 'suspended' AND decision = 'approved' ORDER BY updated_at LIMIT ?`
)

// RunResumeApproved takes over approved suspended runs, oldest decision first.
func (db *DB) RunResumeApproved(ctx context.Context, p *store.RunAcquireParams) ([]*store.Run, error) {
	var out []*store.Run
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ids, err := selectIDs(ctx, tx, approvedRunsQuery, max(p.Limit, 1))
		if err != nil {
			return err
		}
		out, err = acquireTx(ctx, tx, ids, p.RunnerID, formatTime(nowOr(p.Now)), "")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume approved: %w", err)
	}
	return out, nil
}

// RunListStuck lists stale running runs, stalest first.
func (db *DB) RunListStuck(ctx context.Context, staleBefore time.Time, limit int) ([]*store.Run, error) {
	out, err := queryAll(ctx, db.r, scanRun, stuckRunsQuery, formatTime(staleBefore), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("stuck runs: %w", err)
	}
	return out, nil
}

const stuckRunsQuery = `SELECT ` + runColumns + ` FROM workflow_runs r INDEXED BY runs_stuck
	JOIN workflow_queue_items i ON i.id = r.item_id
	WHERE r.status = 'running' AND r.heartbeat_at < ? ORDER BY r.heartbeat_at LIMIT ?`

// rescueFence is RunRescueMany's compare-and-set: the run as the engine read it.
const rescueFence = ` AND lease = ? AND status = 'running' AND heartbeat_at < ?`

// RunRescueMany takes over or settles the stuck runs the engine chose.
func (db *DB) RunRescueMany(ctx context.Context, p *store.RunRescueParams) (recovered, exhausted []*store.Run, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		recovered, exhausted = nil, nil
		now := nowOr(p.Now)
		ts, stale := formatTime(now), formatTime(p.StaleBefore)
		for _, r := range p.Recover {
			res, err := tx.ExecContext(ctx, `UPDATE workflow_runs SET lease = lease + 1, runner_id = ?, heartbeat_at = ?,
				updated_at = ?, recovery_attempts = recovery_attempts + 1 WHERE id = ?`+rescueFence,
				p.RunnerID, ts, ts, r.ID, r.Lease, stale)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
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
			err := tx.QueryRowContext(ctx, `UPDATE workflow_runs SET status = ?, error_kind = ?, error = ?, lease = lease + 1,
				heartbeat_at = ?, updated_at = ?, finished_at = ? WHERE id = ?`+rescueFence+` RETURNING item_id, session_id`,
				x.Outcome.Status, x.Outcome.ErrorKind, x.Outcome.Error, ts, ts, ts, x.ID, x.Lease, stale).Scan(&itemID, &sessionID)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			} else if err != nil {
				return err
			}
			if err := settleItemTx(ctx, tx, itemID, x.Outcome.Status, x.Outcome.ItemStatus, now); err != nil {
				return err
			}
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
