package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const itemColumns = `id, owner_uid, workflow_memo_id, command, dedupe_key, payload, status, run_id, session_id,
	target_version, created_at, claimed_at, settled_at`

func scanItem(row interface{ Scan(...any) error }) (*store.QueueItem, error) {
	var (
		it               store.QueueItem
		payload, created string
		claimed, settled sql.NullString
	)
	if err := row.Scan(&it.ID, &it.OwnerUID, &it.WorkflowMemoID, &it.Command, &it.DedupeKey, &payload, &it.Status,
		&it.RunID, &it.SessionID, &it.TargetVersion, &created, &claimed, &settled); err != nil {
		return nil, interpretError(err)
	}
	it.Payload = decodeMap(payload)
	it.CreatedAt = parseTime(created)
	it.ClaimedAt, it.SettledAt = nullTime(claimed), nullTime(settled)
	return &it, nil
}

func decodeMap(s string) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal([]byte(s), &m)
	return m
}

func nullTime(s sql.NullString) *time.Time {
	if !s.Valid || s.String == "" {
		return nil
	}
	t := parseTime(s.String)
	return &t
}

func nullTimeArg(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// QueueItemInsert enqueues idempotently: INSERT ... ON CONFLICT DO NOTHING on
// (workflow, dedupe key), and only a new row mints a session.
func (db *DB) QueueItemInsert(ctx context.Context, p *store.QueueItemInsertParams) (*store.QueueItem, bool, error) {
	var (
		it      *store.QueueItem
		created bool
	)
	payload := p.Payload
	if payload == nil {
		payload = map[string]any{}
	}
	err := db.tx(ctx, func(tx *sql.Tx) error {
		now := formatTime(time.Now())
		res, err := tx.ExecContext(ctx, `INSERT INTO workflow_queue_items (id, owner_uid, workflow_memo_id, command,
			dedupe_key, payload, session_id, target_version, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (workflow_memo_id, dedupe_key) DO NOTHING`,
			p.ID, p.OwnerUID, p.WorkflowMemoID, p.Command, p.DedupeKey, encodeJSON(payload), p.SessionID, p.TargetVersion, now)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			it, err = scanItem(tx.QueryRowContext(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items
				WHERE workflow_memo_id = ? AND dedupe_key = ?`, p.WorkflowMemoID, p.DedupeKey))
			return err
		}
		created = true
		if p.SessionID == "" && p.NewSession != nil {
			sp := *p.NewSession
			sp.Tags = append(append([]string{}, sp.Tags...), "workflow:"+p.ID)
			s, err := sessionCreateTx(ctx, tx, store.NewID("ses"), &sp)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE workflow_queue_items SET session_id = ? WHERE id = ?`, s.ID, p.ID); err != nil {
				return err
			}
		}
		it, err = scanItem(tx.QueryRowContext(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items WHERE id = ?`, p.ID))
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("enqueue %s: %w", p.Command, err)
	}
	return it, created, nil
}

// QueueItemGetByID reads one item.
func (db *DB) QueueItemGetByID(ctx context.Context, id string) (*store.QueueItem, error) {
	it, err := scanItem(db.r.QueryRowContext(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("queue item %s: %w", id, err)
	}
	return it, nil
}

// QueueItemCountPending counts over the partial pending index only.
func (db *DB) QueueItemCountPending(ctx context.Context) (int64, error) {
	var n int64
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM workflow_queue_items WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("queue count: %w", err)
	}
	return n, nil
}

// QueueItemCountByStatus counts items per status (for metrics).
func (db *DB) QueueItemCountByStatus(ctx context.Context) (map[string]int64, error) {
	return db.countBy(ctx, `SELECT status, COUNT(*) FROM workflow_queue_items GROUP BY status`,
		store.ItemPending, store.ItemClaimed, store.ItemDone, store.ItemFailed)
}

func (db *DB) countBy(ctx context.Context, q string, keys ...string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, k := range keys {
		out[k] = 0
	}
	rows, err := db.r.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k string
			n int64
		)
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("count: %w", err)
		}
		out[k] = n
	}
	return out, rows.Err()
}

// QueueItemClaim is River's claim: one UPDATE ... WHERE id IN (SELECT ...
// LIMIT n) RETURNING stamps status and run id together, and the runs are
// created (with their run_started events) in the same transaction.
func (db *DB) QueueItemClaim(ctx context.Context, p *store.QueueItemClaimParams) ([]*store.Run, error) {
	limit := max(p.Limit, 1)
	var runs []*store.Run
	err := db.tx(ctx, func(tx *sql.Tx) error {
		runs = runs[:0]
		now := nowOr(p.Now)
		ts := formatTime(now)
		// run ids are derived from item ids: 'run_' || the part after 'itm_'.
		rows, err := tx.QueryContext(ctx, `UPDATE workflow_queue_items
			SET status = 'claimed', claimed_at = ?, run_id = 'run_' || substr(id, instr(id, '_') + 1)
			WHERE id IN (SELECT id FROM workflow_queue_items WHERE status = 'pending' ORDER BY created_at, id LIMIT ?)
			RETURNING id, owner_uid, workflow_memo_id, command, payload, session_id, target_version, run_id`, ts, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			r := &store.Run{Status: store.RunRunning, Lease: 1, RunnerID: p.RunnerID, HeartbeatAt: now,
				CreatedAt: now, UpdatedAt: now, Steps: []store.RunStep{}, Manifest: json.RawMessage("null"),
				State: json.RawMessage("{}"), Guards: json.RawMessage("[]")}
			var payload string
			if err := rows.Scan(&r.ItemID, &r.OwnerUID, &r.WorkflowMemoID, &r.Command, &payload, &r.SessionID,
				&r.TargetVersion, &r.ID); err != nil {
				rows.Close()
				return err
			}
			r.Payload = decodeMap(payload)
			runs = append(runs, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, r := range runs {
			if r.ID != store.RunIDForItem(r.ItemID) {
				return fmt.Errorf("claim: run id %s does not derive from item %s", r.ID, r.ItemID)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command,
				session_id, owner_uid, status, runner_id, heartbeat_at, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)`,
				r.ID, r.ItemID, r.WorkflowMemoID, r.Command, r.SessionID, r.OwnerUID, p.RunnerID, ts, ts, ts); err != nil {
				return err
			}
			if err := appendEvents(ctx, tx, r.SessionID, p.Events, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return runs, nil
}

// appendEvents appends fn(r)'s events; events for runs without a session are
// dropped (there is no transcript to write to).
func appendEvents(ctx context.Context, tx *sql.Tx, sessionID string, fn store.EventsFunc, r *store.Run) error {
	if fn == nil {
		return nil
	}
	return appendEventList(ctx, tx, sessionID, fn(r))
}

func appendEventList(ctx context.Context, tx *sql.Tx, sessionID string, evs []store.EventAppendParams) error {
	if sessionID == "" {
		return nil
	}
	for i := range evs {
		ev := evs[i]
		if ev.SessionID == "" {
			ev.SessionID = sessionID
		}
		if _, err := eventAppendTx(ctx, tx, &ev); err != nil {
			return err
		}
	}
	return nil
}
