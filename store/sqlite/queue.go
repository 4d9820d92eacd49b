package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const itemColumns = `id, owner_uid, workflow_memo_id, command, dedupe_key, payload, status, run_id, session_id,
	target_version, trace_context, created_at, claimed_at, settled_at`

func scanItem(row scanner) (*store.QueueItem, error) {
	var (
		it               store.QueueItem
		payload, created string
		claimed, settled sql.NullString
	)
	if err := row.Scan(&it.ID, &it.OwnerUID, &it.WorkflowMemoID, &it.Command, &it.DedupeKey, &payload, &it.Status,
		&it.RunID, &it.SessionID, &it.TargetVersion, &it.TraceContext, &created, &claimed, &settled); err != nil {
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
	it, _, created, err := db.queueItemInsert(ctx, p, nil)
	return it, created, err
}

// QueueItemInsertClaimed inserts a new item claimed, with its run and first
// events, in the enqueue's transaction: no claim statement follows.
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
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		it, run, created = nil, nil, false
		now := time.Now()
		status, runID, claimedAt := store.ItemPending, "", any(nil)
		if c != nil {
			now = nowOr(c.Now)
			status, runID, claimedAt = store.ItemClaimed, c.RunID, formatTime(now)
		}
		ts := formatTime(now)
		sessionID := p.SessionID
		if sessionID == "" && p.NewSession != nil {
			sessionID = store.NewID("ses")
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO workflow_queue_items (id, owner_uid, workflow_memo_id, command,
			dedupe_key, payload, session_id, target_version, trace_context, created_at, status, run_id, claimed_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (workflow_memo_id, dedupe_key) DO NOTHING`,
			p.ID, p.OwnerUID, p.WorkflowMemoID, p.Command, p.DedupeKey, encodeJSON(payload), sessionID, p.TargetVersion,
			p.TraceContext, ts, status, runID, claimedAt)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			it, err = scanItem(tx.QueryRowContext(ctx, `SELECT `+itemColumns+` FROM workflow_queue_items
				WHERE workflow_memo_id = ? AND dedupe_key = ?`, p.WorkflowMemoID, p.DedupeKey))
			return err
		}
		created = true
		if sessionID != p.SessionID {
			sp := *p.NewSession
			sp.Tags = append(append([]string{}, sp.Tags...), "workflow:"+p.ID)
			if err := sessionInsertTx(ctx, tx, sessionID, &sp); err != nil {
				return err
			}
		}
		it = &store.QueueItem{ID: p.ID, OwnerUID: p.OwnerUID, WorkflowMemoID: p.WorkflowMemoID, Command: p.Command,
			DedupeKey: p.DedupeKey, Payload: payload, Status: status, RunID: runID, SessionID: sessionID,
			TargetVersion: p.TargetVersion, TraceContext: p.TraceContext, CreatedAt: parseTime(ts)}
		if c == nil {
			return nil
		}
		at := parseTime(ts)
		it.ClaimedAt = &at
		run = newRun(it, c.RunnerID, at)
		if _, err := tx.ExecContext(ctx, `INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command,
			session_id, owner_uid, status, runner_id, heartbeat_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)`,
			run.ID, it.ID, it.WorkflowMemoID, it.Command, sessionID, it.OwnerUID, c.RunnerID, ts, ts, ts); err != nil {
			return err
		}
		return appendEventList(ctx, tx, sessionID, c.Events)
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("enqueue %s: %w", p.Command, err)
	}
	if created && c == nil {
		db.work.notify(store.WorkNotice{Kind: store.WorkQueued})
	}
	return it, run, created, nil
}

// newRun is the run a claim creates for it, as the claim writes it.
func newRun(it *store.QueueItem, runnerID string, now time.Time) *store.Run {
	return &store.Run{ID: it.RunID, ItemID: it.ID, WorkflowMemoID: it.WorkflowMemoID, Command: it.Command,
		SessionID: it.SessionID, OwnerUID: it.OwnerUID, Payload: it.Payload, TargetVersion: it.TargetVersion,
		TraceContext: it.TraceContext, Status: store.RunRunning, Lease: 1, RunnerID: runnerID, HeartbeatAt: now,
		CreatedAt: now, UpdatedAt: now, Steps: []store.RunStep{}, Manifest: json.RawMessage("null"),
		State: json.RawMessage("{}"), Guards: json.RawMessage("[]")}
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
	if err := db.r.QueryRowContext(ctx, pendingCountQuery).Scan(&n); err != nil {
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

const (
	pendingQuery      = `SELECT id, command, dedupe_key FROM workflow_queue_items WHERE status = 'pending' ORDER BY created_at, id LIMIT ?`
	pendingCountQuery = `SELECT COUNT(*) FROM workflow_queue_items WHERE status = 'pending'`
)

// claimQuery stamps status and run id in one statement, only on items still
// pending: the compare-and-set that makes a claim atomic. The unary + keeps
// the planner off queue_items_status: without statistics it prefers that
// index's status = 'pending' range, every pending item, to the named
// items' primary keys, which made each claim cost the length of the
// backlog (16 % of the process's CPU at 20,000 enqueued in a burst).
func claimQuery(n int) string {
	return `UPDATE workflow_queue_items
		SET status = 'claimed', claimed_at = ?, run_id = 'run_' || substr(id, instr(id, '_') + 1)
		WHERE +status = 'pending' AND id IN (` + placeholders(n) + `)
		RETURNING id, owner_uid, workflow_memo_id, command, payload, session_id, target_version, trace_context, run_id`
}

// QueueItemListPending lists pending heads over the partial pending index.
func (db *DB) QueueItemListPending(ctx context.Context, limit int) ([]*store.QueueItemHead, error) {
	out, err := queryAll(ctx, db.r, func(row scanner) (*store.QueueItemHead, error) {
		var h store.QueueItemHead
		return &h, row.Scan(&h.ID, &h.Command, &h.DedupeKey)
	}, pendingQuery, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("pending items: %w", err)
	}
	return out, nil
}

// QueueItemClaim is River's claim: one UPDATE ... WHERE status = 'pending'
// AND id IN (...) RETURNING stamps status and run id together, and the runs
// are created (with their first events) in the same transaction.
func (db *DB) QueueItemClaim(ctx context.Context, p *store.QueueItemClaimParams) ([]*store.Run, error) {
	if len(p.Claims) == 0 {
		return nil, nil
	}
	now := nowOr(p.Now)
	ts := formatTime(now)
	events := make(map[string][]store.EventAppendParams, len(p.Claims))
	claimArgs := []any{ts}
	for _, c := range p.Claims {
		events[c.ItemID] = c.Events
		claimArgs = append(claimArgs, c.ItemID)
	}
	var runs []*store.Run
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		runs = runs[:0]
		// run ids are derived from item ids: 'run_' || the part after 'itm_'.
		rows, err := tx.QueryContext(ctx, claimQuery(len(p.Claims)), claimArgs...)
		if err != nil {
			return err
		}
		for rows.Next() {
			r := &store.Run{Status: store.RunRunning, Lease: 1, RunnerID: p.RunnerID, HeartbeatAt: now,
				CreatedAt: now, UpdatedAt: now, Steps: []store.RunStep{}, Manifest: json.RawMessage("null"),
				State: json.RawMessage("{}"), Guards: json.RawMessage("[]")}
			var payload string
			if err := rows.Scan(&r.ItemID, &r.OwnerUID, &r.WorkflowMemoID, &r.Command, &payload, &r.SessionID,
				&r.TargetVersion, &r.TraceContext, &r.ID); err != nil {
				rows.Close()
				return err
			}
			r.Payload = decodeMap(payload)
			runs = append(runs, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(runs) == 0 {
			return nil
		}
		args := make([]any, 0, 10*len(runs))
		groups := make([]sessionEvents, 0, len(runs))
		for _, r := range runs {
			if r.ID != store.RunIDForItem(r.ItemID) {
				return fmt.Errorf("claim: run id %s does not derive from item %s", r.ID, r.ItemID)
			}
			args = append(args, r.ID, r.ItemID, r.WorkflowMemoID, r.Command, r.SessionID, r.OwnerUID, p.RunnerID, ts, ts, ts)
			groups = append(groups, sessionEvents{r.SessionID, events[r.ItemID]})
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command,
			session_id, owner_uid, status, runner_id, heartbeat_at, created_at, updated_at) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?), ", len(runs)), ", "), args...); err != nil {
			return err
		}
		return appendEventsMulti(ctx, tx, groups)
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return runs, nil
}

// sessionEvents is one session's share of a multi-session append.
type sessionEvents struct {
	sessionID string
	events    []store.EventAppendParams
}

// appendEventList appends transcript lines for one session.
func appendEventList(ctx context.Context, tx *sql.Tx, sessionID string, evs []store.EventAppendParams) error {
	return appendEventsMulti(ctx, tx, []sessionEvents{{sessionID, evs}})
}

// appendEventsMulti appends engine transcript lines for several sessions in
// a fixed number of statements: one read of each session's newest ts, one
// counter update per session and one multi-row insert. A run writes several
// lines per transaction and this is the writer's hottest path. The ts rule
// is eventAppendTx's: strictly increasing within a session.
//
// Groups naming the same session (several items of one session claimed in
// one pass) are merged first, in order: each session's ts sequence is then
// assigned once, from its newest ts as read, so no two lines of one batch
// can be given the same ts whatever the batch holds.
func appendEventsMulti(ctx context.Context, tx *sql.Tx, groups []sessionEvents) error {
	var (
		ids  []any
		keep []sessionEvents
	)
	for _, g := range mergeSessionGroups(groups) {
		if g.sessionID == "" || len(g.events) == 0 {
			continue
		}
		for _, ev := range g.events {
			if ev.SessionID != "" && ev.SessionID != g.sessionID {
				// Not a plain run line: take the general path.
				for i := range g.events {
					e := g.events[i]
					if e.SessionID == "" {
						e.SessionID = g.sessionID
					}
					if _, err := eventAppendTx(ctx, tx, &e); err != nil {
						return err
					}
				}
				g.events = nil
				break
			}
		}
		if len(g.events) > 0 {
			keep = append(keep, g)
			ids = append(ids, g.sessionID)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	last := map[string]time.Time{}
	// One MAX per session, which SQLite answers with one seek of
	// session_events_session_ts; a GROUP BY over the sessions walks every
	// event of each (~18 ms at 100,000 events).
	rows, err := tx.QueryContext(ctx, `SELECT s.id, (SELECT MAX(e.ts) FROM session_events e WHERE e.session_id = s.id)
		FROM sessions s WHERE s.id IN (`+placeholders(len(ids))+`)`, ids...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id string
			ts sql.NullString
		)
		if err := rows.Scan(&id, &ts); err != nil {
			rows.Close()
			return err
		}
		if ts.Valid {
			last[id] = parseTime(ts.String)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var (
		args []any
		n    int
	)
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO session_events (session_id, ts, type, actor, payload) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", "), args...)
		args, n = args[:0], 0
		return err
	}
	for _, g := range keep {
		start := now
		if lt, ok := last[g.sessionID]; ok && !start.After(lt) {
			start = lt.Add(time.Microsecond)
		}
		lastTS := formatTime(start.Add(time.Duration(len(g.events)-1) * time.Microsecond))
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET event_count = event_count + ?, last_active_at = ? WHERE id = ?`,
			len(g.events), lastTS, g.sessionID)
		if err != nil {
			return err
		}
		if c, _ := res.RowsAffected(); c == 0 {
			return fmt.Errorf("session %s: %w", g.sessionID, store.ErrNotFound)
		}
		for i, ev := range g.events {
			payload := ev.Payload
			if payload == nil {
				payload = map[string]any{}
			}
			args = append(args, g.sessionID, formatTime(start.Add(time.Duration(i)*time.Microsecond)), ev.Type, ev.Actor, encodeJSON(payload))
			if n++; n == 100 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// mergeSessionGroups folds groups of one session into its first group,
// keeping every event's relative order; groups without a session or events
// are dropped (there is no transcript to write to). The caller's slices are
// never written to: a merge appends to a clipped slice, which copies.
func mergeSessionGroups(groups []sessionEvents) []sessionEvents {
	if len(groups) == 1 {
		return groups // the hot path: one run's lines
	}
	out := make([]sessionEvents, 0, len(groups))
	at := make(map[string]int, len(groups))
	for _, g := range groups {
		if g.sessionID == "" || len(g.events) == 0 {
			continue
		}
		if i, ok := at[g.sessionID]; ok {
			out[i].events = append(slices.Clip(out[i].events), g.events...)
			continue
		}
		at[g.sessionID] = len(out)
		out = append(out, g)
	}
	return out
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
