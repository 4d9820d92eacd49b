package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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
		h                          store.Hold
		approvals, created         string
		selfApproval               int
		decidedAt, edited, expires sql.NullString
		remindEvery                int64
		remindAt                   sql.NullString
	)
	if err := row.Scan(&h.ID, &h.RunID, &h.ItemID, &h.SessionID, &h.OwnerUID, &h.Command, &h.WorkflowName, &h.GateLabel,
		&h.Status, &h.Preview, &h.Output, &approvals, &h.RequiredApprovals, &selfApproval, &h.DecidedBy, &h.DecidedVia,
		&decidedAt, &h.Comment, &edited, &expires, &h.OnTimeout, &created, &h.Title, &remindEvery, &h.RemindersSent,
		&remindAt); err != nil {
		return nil, interpretError(err)
	}
	var rows []approvalRow
	_ = json.Unmarshal([]byte(approvals), &rows)
	h.Approvals = make([]store.HoldApproval, len(rows))
	for i, a := range rows {
		h.Approvals[i] = store.HoldApproval(a)
	}
	h.SelfApproval = selfApproval != 0
	h.DecidedAt, h.ExpiresAt = nullTime(decidedAt), nullTime(expires)
	if edited.Valid {
		s := edited.String
		h.EditedOutput = &s
	}
	h.CreatedAt = parseTime(created)
	h.RemindEvery, h.RemindAt = time.Duration(remindEvery)*time.Millisecond, nullTime(remindAt)
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

func holdGet(ctx context.Context, q queryRower, id string) (*store.Hold, error) {
	return scanHold(q.QueryRowContext(ctx, `SELECT `+holdColumns+` FROM holds WHERE id = ?`, id))
}

// HoldGetByID reads one hold.
func (db *DB) HoldGetByID(ctx context.Context, id string) (*store.Hold, error) {
	h, err := holdGet(ctx, db.r, id)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	return h, nil
}

func (db *DB) holdQuery(ctx context.Context, q string, args ...any) ([]*store.Hold, error) {
	out, err := queryAll(ctx, db.r, scanHold, q, args...)
	if err != nil {
		return nil, fmt.Errorf("hold list: %w", err)
	}
	return out, nil
}

// HoldList lists holds: open ones oldest first (the queue a steward works
// through), decided ones newest first, from p.After on. Pages order by
// (created_at, id), which the holds_status_created and holds_created indexes
// end in, so each page is a bounded index walk.
func (db *DB) HoldList(ctx context.Context, p *store.HoldListParams) ([]*store.Hold, error) {
	q, args := holdListQuery(p)
	return db.holdQuery(ctx, q, args...)
}

// HoldListByRun is a run's holds, oldest first.
func (db *DB) HoldListByRun(ctx context.Context, runID string) ([]*store.Hold, error) {
	return db.holdQuery(ctx, holdsOfRunQuery, runID)
}

const holdsOfRunQuery = `SELECT ` + holdColumns + ` FROM holds INDEXED BY holds_run WHERE run_id = ? ORDER BY rowid` // rowid: the order they were written

func holdListQuery(p *store.HoldListParams) (string, []any) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	if p.Decided || ((p.Command != "" || p.OwnerUID != "") && p.Status == store.HoldOpen) {
		return holdFilteredQuery(p, limit)
	}
	q := `SELECT ` + holdColumns + ` FROM holds`
	var where []string
	var args []any
	switch {
	case p.SessionID != "" && p.Status != "":
		q += ` INDEXED BY holds_session`
		where = append(where, `session_id = ?`, `status = ?`)
		args = append(args, p.SessionID, p.Status)
	case p.SessionID != "":
		where = append(where, `session_id = ?`)
		args = append(args, p.SessionID)
	case p.Status != "":
		where = append(where, `status = ?`)
		args = append(args, p.Status)
	}
	if p.Command != "" {
		where = append(where, `command = ?`)
		args = append(args, p.Command)
	}
	if p.OwnerUID != "" {
		where = append(where, `owner_uid = ?`)
		args = append(args, p.OwnerUID)
	}
	oldestFirst := p.Status == store.HoldOpen
	if p.After != nil {
		if oldestFirst {
			where = append(where, `(created_at, id) > (?, ?)`)
		} else {
			where = append(where, `(created_at, id) < (?, ?)`)
		}
		args = append(args, formatTime(p.After.CreatedAt), p.After.ID)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	if oldestFirst {
		q += ` ORDER BY created_at, id LIMIT ?`
	} else {
		q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	}
	return q, append(args, limit)
}

// holdFilteredQuery lists the open queue by workflow or requester, or the
// decided history (newest decision first, optionally by workflow or
// requester), each from its partial index (migration 021). The status
// condition is written literally: SQLite uses a partial index only when the
// query's WHERE implies the index's.
func holdFilteredQuery(p *store.HoldListParams, limit int) (string, []any) {
	var (
		where []string
		args  []any
		index string
	)
	if p.Decided {
		where = append(where, `status <> 'open'`)
		switch {
		case p.Command != "":
			index = "holds_decided_command"
		case p.OwnerUID != "":
			index = "holds_decided_owner"
		default:
			index = "holds_decided"
		}
	} else {
		where = append(where, `status = 'open'`)
		index = "holds_open_owner"
		if p.Command != "" {
			index = "holds_open_command"
		}
	}
	if p.Command != "" {
		where = append(where, `command = ?`)
		args = append(args, p.Command)
	}
	if p.OwnerUID != "" {
		where = append(where, `owner_uid = ?`)
		args = append(args, p.OwnerUID)
	}
	if p.SessionID != "" {
		where = append(where, `session_id = ?`)
		args = append(args, p.SessionID)
	}
	order := ` ORDER BY created_at, id LIMIT ?`
	if p.Decided {
		order = ` ORDER BY decided_at DESC, id DESC LIMIT ?`
		if p.After != nil {
			where = append(where, `(decided_at, id) < (?, ?)`)
			args = append(args, formatTime(p.After.CreatedAt), p.After.ID)
		}
	} else if p.After != nil {
		where = append(where, `(created_at, id) > (?, ?)`)
		args = append(args, formatTime(p.After.CreatedAt), p.After.ID)
	}
	return `SELECT ` + holdColumns + ` FROM holds INDEXED BY ` + index + ` WHERE ` + strings.Join(where, ` AND `) + order,
		append(args, limit)
}

// holdCountOpenQuery counts open holds by workflow and requester, over the
// open partial indexes when one applies.
func holdCountOpenQuery(p *store.HoldListParams) (string, []any) {
	q := `SELECT COUNT(*) FROM holds`
	switch {
	case p.Command != "":
		q += ` INDEXED BY holds_open_command`
	case p.OwnerUID != "":
		q += ` INDEXED BY holds_open_owner`
	case p.SessionID != "":
		q += ` INDEXED BY holds_session`
	}
	q += ` WHERE status = 'open'`
	var args []any
	if p.Command != "" {
		q += ` AND command = ?`
		args = append(args, p.Command)
	}
	if p.OwnerUID != "" {
		q += ` AND owner_uid = ?`
		args = append(args, p.OwnerUID)
	}
	if p.SessionID != "" {
		q += ` AND session_id = ?`
		args = append(args, p.SessionID)
	}
	return q, args
}

// HoldCountOpenMatching counts open holds matching p's filters.
func (db *DB) HoldCountOpenMatching(ctx context.Context, p *store.HoldListParams) (int64, error) {
	q, args := holdCountOpenQuery(p)
	var n int64
	if err := db.r.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("hold count: %w", err)
	}
	return n, nil
}

// HoldCountOpen counts open holds.
func (db *DB) HoldCountOpen(ctx context.Context) (int64, error) {
	var n int64
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM holds WHERE status = 'open'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("hold count: %w", err)
	}
	return n, nil
}

const expiredHoldsQuery = `SELECT ` + holdColumns + ` FROM holds
	WHERE status = 'open' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?`

// HoldListExpired lists open holds past their timeout.
func (db *DB) HoldListExpired(ctx context.Context, now time.Time, limit int) ([]*store.Hold, error) {
	return db.holdQuery(ctx, expiredHoldsQuery, formatTime(now), max(limit, 1))
}

func auditTx(ctx context.Context, tx *sql.Tx, d *store.HoldDecision, now time.Time) error {
	var out any
	if d.Output != nil {
		out = *d.Output
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO hold_decisions (hold_id, run_id, decision, decided_by, via, comment, output,
		outcome, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.HoldID, d.RunID, d.Decision, d.DecidedBy, d.Via, d.Comment, out, d.Outcome, d.Reason, formatTime(now))
	return err
}

// HoldDecisionAppend audits an attempt the engine refused.
func (db *DB) HoldDecisionAppend(ctx context.Context, d *store.HoldDecision) error {
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error { return auditTx(ctx, tx, d, nowOr(d.CreatedAt)) })
	if err != nil {
		return fmt.Errorf("hold audit %s: %w", d.HoldID, err)
	}
	return nil
}

// HoldDecisionList lists a hold's audited attempts, oldest first.
func (db *DB) HoldDecisionList(ctx context.Context, holdID string) ([]*store.HoldDecision, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT id, hold_id, run_id, decision, decided_by, via, comment, output, outcome,
		reason, created_at FROM hold_decisions WHERE hold_id = ? ORDER BY id`, holdID)
	if err != nil {
		return nil, fmt.Errorf("hold audit list: %w", err)
	}
	defer rows.Close()
	out := []*store.HoldDecision{}
	for rows.Next() {
		var (
			d       store.HoldDecision
			output  sql.NullString
			created string
		)
		if err := rows.Scan(&d.ID, &d.HoldID, &d.RunID, &d.Decision, &d.DecidedBy, &d.Via, &d.Comment, &output,
			&d.Outcome, &d.Reason, &created); err != nil {
			return nil, fmt.Errorf("hold audit list: %w", err)
		}
		if output.Valid {
			s := output.String
			d.Output = &s
		}
		d.CreatedAt = parseTime(created)
		out = append(out, &d)
	}
	return out, rows.Err()
}

// HoldDecide applies a decision the engine made, compare-and-set on the
// hold it read (see store.HoldDecideParams).
func (db *DB) HoldDecide(ctx context.Context, p *store.HoldDecideParams) (*store.Hold, error) {
	var h *store.Hold
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := nowOr(p.Now)
		ts := formatTime(now)
		rows := make([]approvalRow, len(p.Approvals))
		for i, a := range p.Approvals {
			rows[i] = approvalRow(a)
		}
		var edited any
		if p.EditedOutput != nil {
			edited = *p.EditedOutput
		}
		q := `UPDATE holds SET status = ?, approvals = ?, edited_output = ?`
		args := []any{p.Status, encodeJSON(rows), edited}
		if p.Status != store.HoldOpen {
			q += `, decided_by = ?, decided_via = ?, decided_at = ?, comment = ?`
			args = append(args, p.DecidedBy, p.DecidedVia, ts, p.Comment)
		}
		q += ` WHERE id = ? AND status = 'open' AND json_array_length(approvals) = ?
			RETURNING run_id, (SELECT session_id FROM workflow_runs WHERE workflow_runs.id = holds.run_id)`
		args = append(args, p.HoldID, p.ExpectApprovals)
		var runID, sessionID string
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&runID, &sessionID); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: hold %s changed since it was read", store.ErrConflict, p.HoldID)
		} else if err != nil {
			return err
		}
		if p.RunDecision != "" {
			var itemID string
			err := tx.QueryRowContext(ctx, `UPDATE workflow_runs SET decision = ?, decided_output = ?, updated_at = ?
				WHERE id = ? AND status = 'suspended' RETURNING item_id`, p.RunDecision, edited, ts, runID).Scan(&itemID)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: run %s is not suspended", store.ErrConflict, runID)
			} else if err != nil {
				return err
			}
			if o := p.Outcome; o != nil {
				if err := settleTx(ctx, tx, runID, itemID, o.Status, o.ItemStatus, o.ErrorKind, o.Error, nil, nil, nil, nil, "", now); err != nil {
					return err
				}
			}
		}
		if err := appendEventList(ctx, tx, sessionID, p.Events); err != nil {
			return err
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
	if p.RunDecision == store.HoldApproved && p.Outcome == nil {
		db.work.notify(store.WorkNotice{Kind: store.WorkResumable})
	}
	return h, nil
}
