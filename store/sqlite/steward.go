package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// remindDueQuery walks the holds_remind partial index: only open holds with
// a reminder still to send are in it.
const remindDueQuery = `SELECT ` + holdColumns + ` FROM holds INDEXED BY holds_remind
	WHERE status = 'open' AND remind_at IS NOT NULL AND remind_at <= ? ORDER BY remind_at LIMIT ?`

// HoldListRemindDue lists open holds whose next reminder is due at now.
func (db *DB) HoldListRemindDue(ctx context.Context, now time.Time, limit int) ([]*store.Hold, error) {
	return db.holdQuery(ctx, remindDueQuery, formatTime(now), max(limit, 1))
}

// HoldRemind records one reminder, compare-and-set on the count the engine
// read (see store.HoldRemindParams).
func (db *DB) HoldRemind(ctx context.Context, p *store.HoldRemindParams) (*store.Hold, error) {
	var h *store.Hold
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var sessionID string
		err := tx.QueryRowContext(ctx, `UPDATE holds SET reminders_sent = reminders_sent + 1, remind_at = ?
			WHERE id = ? AND status = 'open' AND reminders_sent = ? AND remind_at IS NOT NULL
			RETURNING (SELECT session_id FROM workflow_runs WHERE workflow_runs.id = holds.run_id)`,
			nullTimeArg(p.Next), p.HoldID, p.ExpectSent).Scan(&sessionID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: hold %s was decided or reminded since it was read", store.ErrConflict, p.HoldID)
		} else if err != nil {
			return err
		}
		if err := appendEventList(ctx, tx, sessionID, p.Events); err != nil {
			return err
		}
		h, err = holdGet(ctx, tx, p.HoldID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hold remind %s: %w", p.HoldID, err)
	}
	return h, nil
}

// runsByOwnerQuery walks runs_owner_created newest first.
const runsByOwnerQuery = `SELECT ` + runColumns + ` FROM workflow_runs r INDEXED BY runs_owner_created
	JOIN workflow_queue_items i ON i.id = r.item_id WHERE r.owner_uid = ? ORDER BY r.created_at DESC LIMIT ?`

// RunListByOwner lists ownerUID's runs, newest first.
func (db *DB) RunListByOwner(ctx context.Context, ownerUID string, limit int) ([]*store.Run, error) {
	if limit <= 0 || limit > 100 {
		limit = 10
	}
	out, err := queryAll(ctx, db.r, scanRun, runsByOwnerQuery, ownerUID, limit)
	if err != nil {
		return nil, fmt.Errorf("runs of %s: %w", ownerUID, err)
	}
	return out, nil
}
