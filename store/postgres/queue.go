package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const itemColumns = `id, owner_uid, workflow_memo_id, command, dedupe_key, payload, status, run_id, session_id,
	target_version, trace_context, created_at, claimed_at, settled_at`

func scanItem(row scanner) (*store.QueueItem, error) {
	var (
		it      store.QueueItem
		payload string
	)
	if err := row.Scan(&it.ID, &it.OwnerUID, &it.WorkflowMemoID, &it.Command, &it.DedupeKey, &payload, &it.Status,
		&it.RunID, &it.SessionID, &it.TargetVersion, &it.TraceContext, &it.CreatedAt, &it.ClaimedAt, &it.SettledAt); err != nil {
		return nil, interpretError(err)
	}
	it.Payload = decodeMap(payload)
	return &it, nil
}

// QueueItemInsert enqueues idempotently: INSERT ... ON CONFLICT DO NOTHING on
// (workflow, dedupe key), and only a new row mints a session. A new item
// wakes every replica's runner (NOTIFY, delivered at commit).
func (db *DB) QueueItemInsert(ctx context.Context, p *store.QueueItemInsertParams) (*store.QueueItem, bool, error) {
	it, _, created, err := db.queueItemInsert(ctx, p, nil)
	return it, created, err
}

// QueueItemInsertClaimed inserts a new item claimed, with its run and first
// events, in the enqueue's transaction. Nothing is pending, so no replica is
// woken for it.
func (db *DB) QueueItemInsertClaimed(ctx context.Context, p *store.QueueItemInsertParams, c *store.ItemInsertClaim) (*store.QueueItem, *store.Run, bool, error) {
	if c == nil || c.RunID != store.RunIDForItem(p.ID) {
		return nil, nil, false, fmt.Errorf("enqueue %s: run id does not derive from item %s: %w", p.Command, p.ID, store.ErrInvalid)
	}
	return db.queueItemInsert(ctx, p, c)
}

// queueItemInsert writes the item (claimed when c is set) and, for a new
// item, the session it mints and the run c asks for. The session id is
// minted before the insert, so a new item is written once, session and all;
// a repeat keeps the existing row's.
func (db *DB) queueItemInsert(ctx context.Context, p *store.QueueItemInsertParams, c *store.ItemInsertClaim) (*store.QueueItem, *store.Run, bool, error) {
	var (
		it      *store.QueueItem
		run     *store.Run
		created bool
	)
	payload := p.Payload
	if payload == nil {
		payload = map[string]any{}
	}
	// A new session's id is minted before the item is written, so the item
	// is inserted with it (one statement fewer than inserting and then
	// pointing it at the session); the session itself is written only if
	// the item is new. session_id has no foreign key: '' means none.
	sessionID := p.SessionID
	if sessionID == "" && p.NewSession != nil {
		sessionID = store.NewID("ses")
	}
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		it, run, created = nil, nil, false
		now := utc(time.Now())
		status, runID := store.ItemPending, ""
		var claimedAt *time.Time
		if c != nil {
			now = utc(nowOr(c.Now))
			status, runID, claimedAt = store.ItemClaimed, c.RunID, &now
		}
		tag, err := tx.Exec(ctx, `INSERT INTO workflow_queue_items (id, owner_uid, workflow_memo_id, command,
			dedupe_key, payload, session_id, target_version, trace_context, created_at, status, run_id, claimed_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			ON CONFLICT (workflow_memo_id, dedupe_key) DO NOTHING`,
			p.ID, p.OwnerUID, p.WorkflowMemoID, p.Command, p.DedupeKey, encodeJSON(payload), sessionID, p.TargetVersion,
			p.TraceContext, now, status, runID, claimedAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			it, err = scanItem(tx.QueryRow(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items
				WHERE workflow_memo_id = $1 AND dedupe_key = $2`, p.WorkflowMemoID, p.DedupeKey))
			return err
		}
		created = true
		if p.SessionID == "" && p.NewSession != nil {
			sp := *p.NewSession
			sp.Tags = append(append([]string{}, sp.Tags...), "workflow:"+p.ID)
			if err := sessionInsertTx(ctx, tx, sessionID, &sp); err != nil {
				return err
			}
		}
		it = &store.QueueItem{ID: p.ID, OwnerUID: p.OwnerUID, WorkflowMemoID: p.WorkflowMemoID, Command: p.Command,
			DedupeKey: p.DedupeKey, Payload: payload, Status: status, RunID: runID, SessionID: sessionID,
			TargetVersion: p.TargetVersion, TraceContext: p.TraceContext, CreatedAt: now, ClaimedAt: claimedAt}
		if c == nil {
			tx.notifyWork(workQueued)
			return nil
		}
		run = &store.Run{ID: runID, ItemID: it.ID, WorkflowMemoID: it.WorkflowMemoID, Command: it.Command,
			SessionID: sessionID, OwnerUID: it.OwnerUID, Payload: payload, TargetVersion: it.TargetVersion,
			TraceContext: it.TraceContext, Status: store.RunRunning, Lease: 1, RunnerID: c.RunnerID, HeartbeatAt: now,
			CreatedAt: now, UpdatedAt: now, Steps: []store.RunStep{}, Manifest: json.RawMessage("null"),
			State: json.RawMessage("{}"), Guards: json.RawMessage("[]")}
		// The session, the run and the session's event counters go out in
		// one batch.
		tx.later(nil, `INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command,
			session_id, owner_uid, status, runner_id, heartbeat_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $8, $8)`,
			run.ID, it.ID, it.WorkflowMemoID, it.Command, sessionID, it.OwnerUID, c.RunnerID, now)
		_, err = appendEvents(ctx, tx, []sessionEvents{{sessionID, c.Events}})
		return err
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("enqueue %s: %w", p.Command, err)
	}
	return it, run, created, nil
}

// QueueItemListByIDs reads items by primary key in one query.
func (db *DB) QueueItemListByIDs(ctx context.Context, ids []string) ([]*store.QueueItem, error) {
	if len(ids) == 0 {
		return []*store.QueueItem{}, nil
	}
	out, err := queryAll(ctx, db.pool, scanItem, `SELECT `+itemColumns+` FROM workflow_queue_items WHERE id = ANY ($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("queue items: %w", err)
	}
	return out, nil
}

// QueueItemGetByID reads one item.
func (db *DB) QueueItemGetByID(ctx context.Context, id string) (*store.QueueItem, error) {
	it, err := scanItem(db.pool.QueryRow(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("queue item %s: %w", id, err)
	}
	return it, nil
}

// QueueItemCountPending counts over the partial pending index only.
func (db *DB) QueueItemCountPending(ctx context.Context) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM workflow_queue_items WHERE status = 'pending'`).Scan(&n); err != nil {
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
	rows, err := db.pool.Query(ctx, q)
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

// QueueItemListPending lists pending heads over the partial pending index.
// Replicas may list the same heads; QueueItemClaim's SKIP LOCKED makes the
// loser of a race move on at once.
func (db *DB) QueueItemListPending(ctx context.Context, limit int) ([]*store.QueueItemHead, error) {
	out, err := queryAll(ctx, db.pool, func(row scanner) (*store.QueueItemHead, error) {
		var h store.QueueItemHead
		return &h, row.Scan(&h.ID, &h.Command, &h.DedupeKey)
	}, `SELECT id, command, dedupe_key FROM workflow_queue_items WHERE status = 'pending' ORDER BY created_at, id LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("pending items: %w", err)
	}
	return out, nil
}

// QueueItemClaim claims the chosen items with FOR UPDATE SKIP LOCKED: an
// item another replica's claim holds is skipped at once instead of waited
// for, and one the other claim took is no longer pending (the
// compare-and-set). The UPDATE stamps status and run id together, and the
// runs are created, with their first events, in the same transaction.
func (db *DB) QueueItemClaim(ctx context.Context, p *store.QueueItemClaimParams) ([]*store.Run, error) {
	if len(p.Claims) == 0 {
		return nil, nil
	}
	now := utc(nowOr(p.Now))
	events := make(map[string][]store.EventAppendParams, len(p.Claims))
	ids := make([]string, len(p.Claims))
	for i, c := range p.Claims {
		events[c.ItemID] = c.Events
		ids[i] = c.ItemID
	}
	var runs []*store.Run
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		runs = runs[:0]
		// run ids are derived from item ids: 'run_' || the part after 'itm_'.
		rows, err := tx.Query(ctx, `WITH chosen AS (
				SELECT id FROM workflow_queue_items WHERE id = ANY ($2) AND status = 'pending'
				ORDER BY created_at, id FOR UPDATE SKIP LOCKED)
			UPDATE workflow_queue_items i SET status = 'claimed', claimed_at = $1, run_id = 'run_' || substr(i.id, strpos(i.id, '_') + 1)
			FROM chosen WHERE i.id = chosen.id
			RETURNING i.id, i.owner_uid, i.workflow_memo_id, i.command, i.payload, i.session_id, i.target_version, i.trace_context, i.run_id, i.created_at`,
			now, ids)
		if err != nil {
			return err
		}
		type claimed struct {
			r       *store.Run
			created time.Time
		}
		var got []claimed
		for rows.Next() {
			r := &store.Run{Status: store.RunRunning, Lease: 1, RunnerID: p.RunnerID, HeartbeatAt: now,
				CreatedAt: now, UpdatedAt: now, Steps: []store.RunStep{}, Manifest: json.RawMessage("null"),
				State: json.RawMessage("{}"), Guards: json.RawMessage("[]")}
			var (
				payload string
				created time.Time
			)
			if err := rows.Scan(&r.ItemID, &r.OwnerUID, &r.WorkflowMemoID, &r.Command, &payload, &r.SessionID,
				&r.TargetVersion, &r.TraceContext, &r.ID, &created); err != nil {
				rows.Close()
				return err
			}
			r.Payload = decodeMap(payload)
			got = append(got, claimed{r, created})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(got) == 0 {
			return nil
		}
		// Claim order (oldest first), so a session's run_started lines follow
		// its items' order.
		order := make(map[string]int, len(ids))
		for i, id := range ids {
			order[id] = i
		}
		sortBy(got, func(c claimed) int { return order[c.r.ItemID] })
		var (
			rIDs, iIDs, wfs, cmds, sids, owners []string
			groups                              = make([]sessionEvents, 0, len(got))
		)
		for _, c := range got {
			r := c.r
			if r.ID != store.RunIDForItem(r.ItemID) {
				return fmt.Errorf("claim: run id %s does not derive from item %s", r.ID, r.ItemID)
			}
			runs = append(runs, r)
			rIDs, iIDs, wfs = append(rIDs, r.ID), append(iIDs, r.ItemID), append(wfs, r.WorkflowMemoID)
			cmds, sids, owners = append(cmds, r.Command), append(sids, r.SessionID), append(owners, r.OwnerUID)
			groups = append(groups, sessionEvents{r.SessionID, events[r.ItemID]})
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command,
			session_id, owner_uid, status, runner_id, heartbeat_at, created_at, updated_at)
			SELECT u.id, u.item, u.wf, u.cmd, u.sid, u.owner, 'running', $7, $8, $8, $8
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(id, item, wf, cmd, sid, owner)`,
			rIDs, iIDs, wfs, cmds, sids, owners, p.RunnerID, now); err != nil {
			return err
		}
		_, err = appendEvents(ctx, tx, groups)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return runs, nil
}

// sortBy sorts s stably by key.
func sortBy[T any](s []T, key func(T) int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && key(s[j]) < key(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
