package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

func workflowIndexPut(ctx context.Context, tx *sql.Tx, memoID string, w *store.WorkflowIndex, now string) error {
	var command any
	if w.Command != "" {
		command = w.Command
	}
	errs := w.Errors
	if errs == nil {
		errs = []store.CompileError{}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO workflows (memo_id, command, status, summary, invoke, errors, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (memo_id) DO UPDATE SET command = excluded.command, status = excluded.status,
			summary = excluded.summary, invoke = excluded.invoke, errors = excluded.errors, updated_at = excluded.updated_at`,
		memoID, command, w.Status, w.Summary, w.Invoke, encodeJSON(errs), now)
	if err != nil {
		if e := interpretError(err); e != err {
			return fmt.Errorf("%w: command %s is already used by another workflow", store.ErrConflict, w.Command)
		}
	}
	return err
}

const workflowSelect = `SELECT w.memo_id, m.title, COALESCE(w.command, ''), w.status, w.summary, w.invoke, w.errors, w.updated_at
	FROM workflows w JOIN memos m ON m.id = w.memo_id`

func scanWorkflow(row scanner) (*store.Workflow, error) {
	var (
		w       store.Workflow
		errs    string
		updated string
	)
	if err := row.Scan(&w.MemoID, &w.Title, &w.Command, &w.Status, &w.Summary, &w.Invoke, &errs, &updated); err != nil {
		return nil, interpretError(err)
	}
	w.Errors = []store.CompileError{}
	_ = json.Unmarshal([]byte(errs), &w.Errors)
	w.UpdatedAt = parseTime(updated)
	return &w, nil
}

// WorkflowList lists every workflow memo, by command.
func (db *DB) WorkflowList(ctx context.Context) ([]*store.Workflow, error) {
	out, err := queryAll(ctx, db.r, scanWorkflow, workflowSelect+` ORDER BY w.command IS NULL, w.command, m.title`)
	if err != nil {
		return nil, fmt.Errorf("workflow list: %w", err)
	}
	return out, nil
}

// WorkflowGetByCommand finds a workflow by its slash command.
func (db *DB) WorkflowGetByCommand(ctx context.Context, command string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.r.QueryRowContext(ctx, workflowSelect+` WHERE w.command = ?`, command))
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", command, err)
	}
	return w, nil
}

// WorkflowGetByMemoID finds a workflow by its memo.
func (db *DB) WorkflowGetByMemoID(ctx context.Context, memoID string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.r.QueryRowContext(ctx, workflowSelect+` WHERE w.memo_id = ?`, memoID))
	if err != nil {
		return nil, fmt.Errorf("workflow memo %s: %w", memoID, err)
	}
	return w, nil
}

// WorkflowStatusSet changes a workflow's status without touching its memo.
func (db *DB) WorkflowStatusSet(ctx context.Context, memoID, status string) (*store.Workflow, error) {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE workflows SET status = ?, updated_at = ? WHERE memo_id = ?`,
			status, formatTime(time.Now()), memoID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workflow status %s: %w", memoID, err)
	}
	return db.WorkflowGetByMemoID(ctx, memoID)
}
