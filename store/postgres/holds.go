package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const holdColumns = `id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status, preview, output,
	approvals, required_approvals, self_approval, decided_by, decided_via, decided_at, comment, edited_output,
	expires_at, on_timeout, created_at, title, remind_every_ms, reminders_sent, remind_at`

func scanHold(row scanner) (*store.Hold, error) {
	var (
		h           store.Hold
		approvals   string
		remindEvery int64
	)
	if err := row.Scan(&h.ID, &h.RunID, &h.ItemID, &h.SessionID, &h.OwnerUID, &h.Command, &h.WorkflowName, &h.GateLabel,
		&h.Status, &h.Preview, &h.Output, &approvals, &h.RequiredApprovals, &h.SelfApproval, &h.DecidedBy, &h.DecidedVia,
		&h.DecidedAt, &h.Comment, &h.EditedOutput, &h.ExpiresAt, &h.OnTimeout, &h.CreatedAt, &h.Title, &remindEvery, &h.RemindersSent, &h.RemindAt); err != nil {
		return nil, interpretError(err)
	}
	h.RemindEvery = time.Duration(remindEvery) * time.Millisecond
	var rows []approvalRow
	_ = json.Unmarshal([]byte(approvals), &rows)
	h.Approvals = make([]store.HoldApproval, len(rows))
	for i, a := range rows {
		h.Approvals[i] = store.HoldApproval(a)
	}
	return &h, nil
}

// approvalRow keeps the decider key, which HoldApproval hides from JSON
// answers but the store needs to count distinct stewards.
type approvalRow struct {
	By      string    `json:"by"`
	Key     string    `json:"key"`
	Via     string    `json:"via"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment"`
	Edited  bool      `json:"edited,omitempty"`
}

func holdGet(ctx context.Context, q querier, id string) (*store.Hold, error) {
	return scanHold(q.QueryRow(ctx, `SELECT `+holdColumns+` FROM holds WHERE id = $1`, id))
}

// HoldGetByID reads one hold.
func (db *DB) HoldGetByID(ctx context.Context, id string) (*store.Hold, error) {
	h, err := holdGet(ctx, db.pool, id)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	return h, nil
}

func (db *DB) holdQuery(ctx context.Context, q string, args ...any) ([]*store.Hold, error) {
	out, err := queryAll(ctx, db.pool, scanHold, q, args...)
	if err != nil {
		return nil, fmt.Errorf("hold list: %w", err)
	}
	return out, nil
}

// HoldList lists holds: open ones oldest first, decided ones newest first,
// from p.After on, by (created_at, id); the decided history (p.Decided)
// newest decision first, by (decided_at, id). The open and decided status
// conditions are written literally, so a cached generic plan can still use
// the partial indexes (migration 003).
func (db *DB) HoldList(ctx context.Context, p *store.HoldListParams) ([]*store.Hold, error) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	switch {
	case p.Decided:
		where = append(where, `status <> 'open'`)
	case p.Status == store.HoldOpen:
		where = append(where, `status = 'open'`)
	case p.Status != "":
		where = append(where, `status = `+arg(p.Status))
	}
	where = append(where, holdFilters(p, arg)...)
	oldestFirst := p.Status == store.HoldOpen && !p.Decided
	order := ` ORDER BY created_at DESC, id DESC`
	switch {
	case p.Decided:
		order = ` ORDER BY decided_at DESC, id DESC`
		if p.After != nil {
			where = append(where, `(decided_at, id) < (`+arg(p.After.CreatedAt)+`, `+arg(p.After.ID)+`)`)
		}
	case oldestFirst:
		order = ` ORDER BY created_at, id`
		if p.After != nil {
			where = append(where, `(created_at, id) > (`+arg(p.After.CreatedAt)+`, `+arg(p.After.ID)+`)`)
		}
	case p.After != nil:
		where = append(where, `(created_at, id) < (`+arg(p.After.CreatedAt)+`, `+arg(p.After.ID)+`)`)
	}
	q := `SELECT ` + holdColumns + ` FROM holds`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return db.holdQuery(ctx, q+order+` LIMIT `+arg(limit), args...)
}

// HoldListByRun is a run's holds, oldest first.
func (db *DB) HoldListByRun(ctx context.Context, runID string) ([]*store.Hold, error) {
	return db.holdQuery(ctx, `SELECT `+holdColumns+` FROM holds WHERE run_id = $1 ORDER BY created_at, id`, runID)
}

// holdFilters is the WHERE of p's session, workflow and requester filters.
func holdFilters(p *store.HoldListParams, arg func(any) string) []string {
	var where []string
	if p.SessionID != "" {
		where = append(where, `session_id = `+arg(p.SessionID))
	}
	if p.Command != "" {
		where = append(where, `command = `+arg(p.Command))
	}
	if p.OwnerUID != "" {
		where = append(where, `owner_uid = `+arg(p.OwnerUID))
	}
	return where
}

// HoldCountOpen counts open holds.
func (db *DB) HoldCountOpen(ctx context.Context) (int64, error) {
	return db.HoldCountOpenMatching(ctx, &store.HoldListParams{})
}

// HoldCountOpenMatching counts open holds matching p's workflow, requester
// and session, over the open partial indexes.
func (db *DB) HoldCountOpenMatching(ctx context.Context, p *store.HoldListParams) (int64, error) {
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	where := append([]string{`status = 'open'`}, holdFilters(p, arg)...)
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM holds WHERE `+strings.Join(where, ` AND `), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("hold count: %w", err)
	}
	return n, nil
}

// HoldListExpired lists open holds past their timeout.
func (db *DB) HoldListExpired(ctx context.Context, now time.Time, limit int) ([]*store.Hold, error) {
	return db.holdQuery(ctx, `SELECT `+holdColumns+` FROM holds
		WHERE status = 'open' AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2`, now, max(limit, 1))
}

func auditTx(ctx context.Context, tx *txn, d *store.HoldDecision, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO hold_decisions (hold_id, run_id, decision, decided_by, via, comment, output,
		outcome, reason, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		d.HoldID, d.RunID, d.Decision, d.DecidedBy, d.Via, d.Comment, d.Output, d.Outcome, d.Reason, utc(now))
	return err
}

// HoldDecisionAppend audits an attempt the engine refused.
func (db *DB) HoldDecisionAppend(ctx context.Context, d *store.HoldDecision) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error { return auditTx(ctx, tx, d, nowOr(d.CreatedAt)) })
	if err != nil {
		return fmt.Errorf("hold audit %s: %w", d.HoldID, err)
	}
	return nil
}

// HoldDecisionList lists a hold's audited attempts, oldest first.
func (db *DB) HoldDecisionList(ctx context.Context, holdID string) ([]*store.HoldDecision, error) {
	out, err := queryAll(ctx, db.pool, func(row scanner) (*store.HoldDecision, error) {
		var d store.HoldDecision
		return &d, row.Scan(&d.ID, &d.HoldID, &d.RunID, &d.Decision, &d.DecidedBy, &d.Via, &d.Comment, &d.Output,
			&d.Outcome, &d.Reason, &d.CreatedAt)
	}, `SELECT id, hold_id, run_id, decision, decided_by, via, comment, output, outcome,
		reason, created_at FROM hold_decisions WHERE hold_id = $1 ORDER BY id`, holdID)
	if err != nil {
		return nil, fmt.Errorf("hold audit list: %w", err)
	}
	return out, nil
}

// HoldDecide applies a decision the engine made, compare-and-set on the
// hold it read (see store.HoldDecideParams). An approval that settles the
// hold wakes every replica's runner at commit.
func (db *DB) HoldDecide(ctx context.Context, p *store.HoldDecideParams) (*store.Hold, error) {
	var h *store.Hold
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		now := utc(nowOr(p.Now))
		rows := make([]approvalRow, len(p.Approvals))
		for i, a := range p.Approvals {
			rows[i] = approvalRow(a)
		}
		args := []any{p.Status, encodeJSON(rows), p.EditedOutput, p.HoldID, p.ExpectApprovals}
		q := `UPDATE holds SET status = $1, approvals = $2, edited_output = $3`
		if p.Status != store.HoldOpen {
			q += `, decided_by = $6, decided_via = $7, decided_at = $8, comment = $9`
			args = append(args, p.DecidedBy, p.DecidedVia, now, p.Comment)
		}
		q += ` WHERE id = $4 AND status = 'open' AND json_array_length(approvals::json) = $5
			RETURNING run_id, (SELECT session_id FROM workflow_runs WHERE workflow_runs.id = holds.run_id)`
		var (
			runID     string
			sessionID *string
		)
		if err := tx.QueryRow(ctx, q, args...).Scan(&runID, &sessionID); isNoRows(err) {
			return fmt.Errorf("%w: hold %s changed since it was read", store.ErrConflict, p.HoldID)
		} else if err != nil {
			return err
		}
		if p.RunDecision != "" {
			var itemID string
			err := tx.QueryRow(ctx, `UPDATE workflow_runs SET decision = $1, decided_output = $2, updated_at = $3
				WHERE id = $4 AND status = 'suspended' RETURNING item_id`, p.RunDecision, p.EditedOutput, now, runID).Scan(&itemID)
			if isNoRows(err) {
				return fmt.Errorf("%w: run %s is not suspended", store.ErrConflict, runID)
			} else if err != nil {
				return err
			}
			if o := p.Outcome; o != nil {
				if _, err := settleRunTx(ctx, tx, runID, nil, o.Status, o.ErrorKind, o.Error, nil, nil, nil, nil, nil, "", now); err != nil {
					return err
				}
				settleItemTx(tx, itemID, o.Status, o.ItemStatus, now)
			} else if p.RunDecision == store.HoldApproved {
				tx.notifyWork(workResumable)
			}
		}
		if sessionID != nil {
			if err := appendEventList(ctx, tx, *sessionID, p.Events); err != nil {
				return err
			}
		}
		audit := p.Audit
		if err := auditTx(ctx, tx, &audit, now); err != nil {
			return err
		}
		var err error
		h, err = holdGet(ctx, tx, p.HoldID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hold decide %s: %w", p.HoldID, err)
	}
	return h, nil
}
