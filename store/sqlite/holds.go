package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const holdColumns = `id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status, preview, output,
	approvals, required_approvals, self_approval, decided_by, decided_via, decided_at, comment, edited_output,
	expires_at, on_timeout, created_at`

func scanHold(row scanner) (*store.Hold, error) {
	var (
		h                          store.Hold
		approvals, created         string
		selfApproval               int
		decidedAt, edited, expires sql.NullString
	)
	if err := row.Scan(&h.ID, &h.RunID, &h.ItemID, &h.SessionID, &h.OwnerUID, &h.Command, &h.WorkflowName, &h.GateLabel,
		&h.Status, &h.Preview, &h.Output, &approvals, &h.RequiredApprovals, &selfApproval, &h.DecidedBy, &h.DecidedVia,
		&decidedAt, &h.Comment, &edited, &expires, &h.OnTimeout, &created); err != nil {
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

// HoldDecide applies one decision attempt. Conflicts are audited and
// committed, then reported as ErrConflict.
func (db *DB) HoldDecide(ctx context.Context, p *store.HoldDecideParams) (*store.Hold, error) {
	var (
		h       *store.Hold
		refusal error
	)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		h, refusal = nil, nil
		now := nowOr(p.Now)
		ts := formatTime(now)
		cur, err := holdGet(ctx, tx, p.HoldID)
		if err != nil {
			return err
		}
		audit := &store.HoldDecision{HoldID: cur.ID, RunID: cur.RunID, Decision: p.Decision, DecidedBy: p.DecidedBy,
			Via: p.Via, Comment: p.Comment, Output: p.Output, Outcome: store.AttemptAccepted}
		conflict := func(format string, args ...any) error {
			audit.Outcome = store.AttemptConflict
			audit.Reason = fmt.Sprintf(format, args...)
			refusal = store.Refuse(store.ErrConflict, "%s", audit.Reason)
			h = cur
			return auditTx(ctx, tx, audit, now)
		}
		if cur.Status != store.HoldOpen {
			when := ""
			if cur.DecidedAt != nil {
				when = " at " + cur.DecidedAt.Format(time.RFC3339)
			}
			return conflict("hold %s was already %s by %s via %s%s", cur.ID, cur.Status, cur.DecidedBy, cur.DecidedVia, when)
		}
		var rows []approvalRow
		var approvals string
		if err := tx.QueryRowContext(ctx, `SELECT approvals FROM holds WHERE id = ?`, cur.ID).Scan(&approvals); err != nil {
			return err
		}
		_ = json.Unmarshal([]byte(approvals), &rows)

		decided := false
		status := cur.Status
		switch p.Decision {
		case "approve":
			for _, a := range rows {
				if a.Key == p.DeciderKey && !p.Force {
					return conflict("%s already approved hold %s; it needs %d distinct stewards", p.DecidedBy, cur.ID, cur.RequiredApprovals)
				}
			}
			rows = append(rows, approvalRow{By: p.DecidedBy, Key: p.DeciderKey, Via: p.Via, At: parseTime(ts), Comment: p.Comment})
			if p.Force || len(rows) >= cur.RequiredApprovals {
				decided, status = true, store.HoldApproved
			} else {
				audit.Reason = fmt.Sprintf("approval %d of %d", len(rows), cur.RequiredApprovals)
			}
		case "reject":
			decided, status = true, store.HoldRejected
		default:
			return fmt.Errorf("decision must be approve or reject, got %q", p.Decision)
		}
		var edited any
		if p.Output != nil {
			edited = *p.Output
		} else if cur.EditedOutput != nil {
			edited = *cur.EditedOutput
		}
		if !decided {
			if _, err := tx.ExecContext(ctx, `UPDATE holds SET approvals = ?, edited_output = ? WHERE id = ?`,
				encodeJSON(rows), edited, cur.ID); err != nil {
				return err
			}
			if p.Events != nil {
				// A partial approval is news too (a card shows who has
				// approved so far), recorded with the approval itself.
				run, err := runGet(ctx, tx, cur.RunID)
				if err != nil {
					return err
				}
				if h, err = holdGet(ctx, tx, cur.ID); err != nil {
					return err
				}
				if err := appendEventList(ctx, tx, run.SessionID, p.Events(h, run)); err != nil {
					return err
				}
			}
		} else {
			if _, err := tx.ExecContext(ctx, `UPDATE holds SET status = ?, approvals = ?, decided_by = ?, decided_via = ?,
				decided_at = ?, comment = ?, edited_output = ? WHERE id = ?`,
				status, encodeJSON(rows), p.DecidedBy, p.Via, ts, p.Comment, edited, cur.ID); err != nil {
				return err
			}
			run, err := runGet(ctx, tx, cur.RunID)
			if err != nil {
				return err
			}
			if run.Status != store.RunSuspended {
				return fmt.Errorf("%w: run %s is %s, not suspended", store.ErrConflict, run.ID, run.Status)
			}
			if status == store.HoldApproved {
				// The decision is recorded on the run: that, not the hold
				// row, is what lets the runner resume it.
				if _, err := tx.ExecContext(ctx, `UPDATE workflow_runs SET decision = 'approved', decided_output = ?,
					updated_at = ? WHERE id = ?`, edited, ts, run.ID); err != nil {
					return err
				}
			} else {
				msg := "rejected by " + p.DecidedBy
				if p.Comment != "" {
					msg += ": " + p.Comment
				}
				if _, err := tx.ExecContext(ctx, `UPDATE workflow_runs SET decision = 'rejected' WHERE id = ?`, run.ID); err != nil {
					return err
				}
				if err := settleTx(ctx, tx, run.ID, run.ItemID, store.RunCancelled, store.ItemFailed, "cancelled", msg, nil, nil, nil, nil, "", now); err != nil {
					return err
				}
			}
			if run, err = runGet(ctx, tx, cur.RunID); err != nil {
				return err
			}
			if h, err = holdGet(ctx, tx, cur.ID); err != nil {
				return err
			}
			if p.Events != nil {
				if err := appendEventList(ctx, tx, run.SessionID, p.Events(h, run)); err != nil {
					return err
				}
			}
		}
		if err := auditTx(ctx, tx, audit, now); err != nil {
			return err
		}
		if h == nil {
			h, err = holdGet(ctx, tx, cur.ID)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hold decide %s: %w", p.HoldID, err)
	}
	if refusal != nil {
		return h, refusal
	}
	return h, nil
}
