package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const sessionColumns = `id, title, status, done_reason, origin, platform, tags, context, capabilities, archived,
	forked_from, policy, base_policy, request_count, caller_user, caller_key_id, created_by, active_run_id, turn_heartbeat_at,
	event_count, last_active_at, created_at`

func scanSession(row scanner) (*store.Session, error) {
	var (
		s                   store.Session
		tags, ctxJSON, caps string
	)
	if err := row.Scan(&s.ID, &s.Title, &s.Status, &s.DoneReason, &s.Origin, &s.Platform, &tags, &ctxJSON, &caps,
		&s.Archived, &s.ForkedFrom, &s.Policy, &s.BasePolicy, &s.RequestCount, &s.CallerUser, &s.CallerKeyID, &s.CreatedBy,
		&s.ActiveRunID, &s.TurnHeartbeatAt, &s.EventCount, &s.LastActiveAt, &s.CreatedAt); err != nil {
		return nil, interpretError(err)
	}
	s.Tags, s.Capabilities = decodeStrings(tags), decodeStrings(caps)
	s.Context = map[string]any{}
	_ = json.Unmarshal([]byte(ctxJSON), &s.Context)
	return &s, nil
}

// SessionCreate inserts a session and claims its tags; a tag already held by
// another session is ErrConflict and nothing is written.
func (db *DB) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	id := store.NewID("ses")
	var s *store.Session
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		s, err = sessionCreateTx(ctx, tx, id, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session create: %w", err)
	}
	return s, nil
}

func sessionCreateTx(ctx context.Context, tx *txn, id string, p *store.SessionCreateParams) (*store.Session, error) {
	if err := sessionInsertTx(ctx, tx, id, p); err != nil {
		return nil, err
	}
	return sessionGet(ctx, tx, id)
}

// sessionInsertTx writes a session, its tags and first events; callers that
// need the row back read it (an enqueue that mints a session does not).
func sessionInsertTx(ctx context.Context, tx *txn, id string, p *store.SessionCreateParams) error {
	now := utc(time.Now())
	tags := store.Distinct(p.Tags)
	ctxMap := p.Context
	if ctxMap == nil {
		ctxMap = map[string]any{}
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	// The session and its tag rows are one statement, sent with the
	// transaction's next: a tag another session holds fails it whole. The
	// id is freshly minted, so a unique violation can only be a tag's.
	tx.later(func(err error) error {
		if isConflict(err) && len(tags) > 0 {
			return fmt.Errorf("%w: a tag of %q belongs to another session", store.ErrConflict, strings.Join(tags, ", "))
		}
		return err
	}, `WITH s AS (INSERT INTO sessions (id, title, origin, platform, tags, context, capabilities,
		forked_from, policy, base_policy, caller_user, caller_key_id, created_by, last_active_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $13) RETURNING id)
		INSERT INTO session_tags (tag, session_id) SELECT t, s.id FROM s, unnest($14::text[]) AS t`,
		id, p.Title, p.Origin, p.Platform, encodeJSON(tags), encodeJSON(ctxMap), encodeJSON(caps),
		p.ForkedFrom, p.Policy, p.CallerUser, p.CallerKeyID, p.CreatedBy, now, tags)
	if len(p.Events) > 0 {
		evs := make([]store.EventAppendParams, len(p.Events))
		for i, e := range p.Events {
			e.SessionID = id
			evs[i] = *e
		}
		if err := appendEventList(ctx, tx, id, evs); err != nil {
			return err
		}
	}
	return nil
}

func sessionGet(ctx context.Context, q querier, id string) (*store.Session, error) {
	// The open-holds count rides along in the same round trip (every run
	// reads its session for the prompt).
	var open int64
	s, err := scanSession(alsoScan{q.QueryRow(ctx, `SELECT `+sessionColumns+`,
		(SELECT COUNT(*) FROM holds h WHERE h.session_id = s.id AND h.status = 'open') FROM sessions s WHERE s.id = $1`, id), &open})
	if err != nil {
		return nil, err
	}
	s.OpenHolds = open
	return s, nil
}

// alsoScan scans a row with one column more than its scan function reads.
type alsoScan struct {
	row   scanner
	extra any
}

func (a alsoScan) Scan(dest ...any) error { return a.row.Scan(append(dest, a.extra)...) }

// SessionGetByID reads a session.
func (db *DB) SessionGetByID(ctx context.Context, id string) (*store.Session, error) {
	s, err := sessionGet(ctx, db.pool, id)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return s, nil
}

// SessionGetBare reads the session row without counting its open holds.
func (db *DB) SessionGetBare(ctx context.Context, id string) (*store.Session, error) {
	s, err := scanSession(db.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return s, nil
}

// SessionGetByTag reads the session holding tag.
func (db *DB) SessionGetByTag(ctx context.Context, tag string) (*store.Session, error) {
	s, err := scanSession(db.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE id = (SELECT session_id FROM session_tags WHERE tag = $1)`, tag))
	if err == nil {
		err = fillOpenHolds(ctx, db.pool, []*store.Session{s})
	}
	if err != nil {
		return nil, fmt.Errorf("session tagged %q: %w", tag, err)
	}
	return s, nil
}

// EventAppend appends an event in its own transaction.
func (db *DB) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.Event, error) {
	var ev *store.Event
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		ev, err = appendOne(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("event append: %w", err)
	}
	return ev, nil
}

// sessionSearchText is what the text filter matches, the expression of the
// sessions_search index (migration 006): title and tags, an engine-minted
// workflow:<item id> tag reduced to "workflow:".
const sessionSearchText = `(s.title || ' ' || regexp_replace(s.tags, '"workflow:itm_[^"]*"', '"workflow:"', 'g'))`

// SessionList pages sessions newest activity first: one index range per
// origin (sessions_listing), each cut at the limit, merged. A text filter is
// a case-insensitive substring match of title or tags, served by the
// trigram index once it is three characters or more.
func (db *DB) SessionList(ctx context.Context, p *store.SessionListParams) ([]*store.Session, error) {
	if len(p.Origins) == 0 {
		return []*store.Session{}, nil
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	q := store.CleanSearchText(p.Query)
	var (
		cond []string
		args = []any{store.Distinct(p.Origins), limit}
	)
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if !p.IncludeArchived {
		cond = append(cond, "NOT s.archived")
	}
	if q != "" {
		cond = append(cond, sessionSearchText+` ILIKE `+arg("%"+likeEscape(q)+"%"))
	}
	if p.After != nil {
		cond = append(cond, "(s.last_active_at, s.id) < ("+arg(p.After.LastActiveAt)+", "+arg(p.After.ID)+")")
	}
	where := ""
	for _, c := range cond {
		where += " AND " + c
	}
	cols := "s." + strings.ReplaceAll(sessionColumns, ", ", ", s.")
	cols = strings.ReplaceAll(cols, ",\n\t", ",\n\ts.")
	query := `SELECT page.* FROM unnest($1::text[]) AS o(origin), LATERAL (
			SELECT ` + cols + ` FROM sessions s WHERE s.origin = o.origin AND s.event_count > 0` + where + `
			ORDER BY s.last_active_at DESC, s.id DESC LIMIT $2) AS page
		ORDER BY page.last_active_at DESC, page.id DESC LIMIT $2`
	if q != "" {
		release, err := db.searchSlot(ctx)
		if err != nil {
			return nil, fmt.Errorf("session list: %w", err)
		}
		defer release()
	}
	out, err := queryAll(ctx, db.pool, scanSession, query, args...)
	if err != nil {
		return nil, fmt.Errorf("session list: %w", err)
	}
	if err := fillOpenHolds(ctx, db.pool, out); err != nil {
		return nil, fmt.Errorf("session list: %w", err)
	}
	return out, nil
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// SessionOpenHoldCounts answers open holds per session in one query.
func (db *DB) SessionOpenHoldCounts(ctx context.Context, ids []string) (map[string]int64, error) {
	out, err := openHoldCounts(ctx, db.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("open holds: %w", err)
	}
	return out, nil
}

func openHoldCounts(ctx context.Context, q querier, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT session_id, COUNT(*) FROM holds WHERE status = 'open' AND session_id = ANY ($1)
		GROUP BY session_id`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			n  int64
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// fillOpenHolds sets OpenHolds on a page of sessions with one query.
func fillOpenHolds(ctx context.Context, q querier, ss []*store.Session) error {
	if len(ss) == 0 {
		return nil
	}
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.ID
	}
	counts, err := openHoldCounts(ctx, q, ids)
	if err != nil {
		return err
	}
	for _, s := range ss {
		s.OpenHolds = counts[s.ID]
	}
	return nil
}

// SessionFork creates the fork and copies the events up to p.At (keeping
// their ts, taking new ids) in one transaction.
func (db *DB) SessionFork(ctx context.Context, p *store.SessionForkParams) (*store.Session, error) {
	id := store.NewID("ses")
	var s *store.Session
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		src, err := sessionGet(ctx, tx, p.SourceID)
		if err != nil {
			return fmt.Errorf("session %s: %w", p.SourceID, err)
		}
		title := p.Title
		if title == "" {
			title = src.Title
		}
		if _, err := sessionCreateTx(ctx, tx, id, &store.SessionCreateParams{
			Title: title, Origin: src.Origin, Platform: src.Platform, Context: src.Context,
			Capabilities: src.Capabilities, Policy: p.Policy, ForkedFrom: src.ID,
			CallerUser: p.CallerUser, CallerKeyID: p.CallerKeyID, CreatedBy: p.CreatedBy,
		}); err != nil {
			return err
		}
		// The copy inserts event rows, so it takes the events lock, held to
		// the commit (see flushEventsQuery).
		if err := tx.lockEvents(ctx); err != nil {
			return err
		}
		var (
			n    int64
			last *time.Time
		)
		if err := tx.QueryRow(ctx, `WITH copied AS (
				INSERT INTO session_events (session_id, ts, type, actor, payload)
				SELECT $1, ts, type, actor, payload FROM session_events WHERE session_id = $2 AND ts <= $3 ORDER BY ts
				RETURNING ts)
			SELECT COUNT(*), MAX(ts) FROM copied`, id, src.ID, utc(p.At)).Scan(&n, &last); err != nil {
			return err
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, (SELECT MAX(id) FROM session_events)::text)`, db.eventsChannel); err != nil {
				return err
			}
		}
		// The copied policy_set events replay the source's history, so the
		// fork starts, before them, from where the source started.
		if _, err := tx.Exec(ctx, `UPDATE sessions SET event_count = $1, last_event_ts = $2, base_policy = $3 WHERE id = $4`,
			n, last, src.BasePolicy, id); err != nil {
			return err
		}
		s, err = sessionGet(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session fork: %w", err)
	}
	return s, nil
}

// SessionUpdate applies p in one transaction; the session row is locked
// first, so ExpectActiveRunID is a true compare-and-set across replicas.
func (db *DB) SessionUpdate(ctx context.Context, p *store.SessionUpdateParams) (*store.Session, []*store.Event, error) {
	var (
		s      *store.Session
		events []*store.Event
	)
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		events = nil
		var current string
		if err := tx.QueryRow(ctx, `SELECT active_run_id FROM sessions WHERE id = $1 FOR UPDATE`, p.ID).Scan(&current); err != nil {
			return fmt.Errorf("session %s: %w", p.ID, interpretError(err))
		}
		if p.ExpectActiveRunID != nil && *p.ExpectActiveRunID != current {
			return fmt.Errorf("%w: session %s has active run %q, not %q", store.ErrConflict, p.ID, current, *p.ExpectActiveRunID)
		}
		var (
			sets []string
			args []any
		)
		set := func(col string, v any) {
			args = append(args, v)
			sets = append(sets, fmt.Sprintf("%s = $%d", col, len(args)))
		}
		if p.ActiveRunID != nil {
			var beat *time.Time
			if *p.ActiveRunID != "" {
				t := utc(time.Now())
				beat = &t
			}
			set("active_run_id", *p.ActiveRunID)
			set("turn_heartbeat_at", beat)
			set("turn_cancel", "")
		}
		if p.Title != nil {
			set("title", *p.Title)
		}
		if p.Status != nil {
			set("status", *p.Status)
		}
		if p.DoneReason != nil {
			set("done_reason", *p.DoneReason)
		}
		if p.Archived != nil {
			set("archived", *p.Archived)
		}
		if p.Policy != nil {
			set("policy", *p.Policy)
		}
		if len(sets) > 0 {
			args = append(args, p.ID)
			if _, err := tx.Exec(ctx, `UPDATE sessions SET `+strings.Join(sets, ", ")+fmt.Sprintf(` WHERE id = $%d`, len(args)), args...); err != nil {
				return err
			}
		}
		if len(p.Events) > 0 {
			evs := make([]store.EventAppendParams, len(p.Events))
			for i, e := range p.Events {
				e.SessionID = p.ID
				evs[i] = *e
			}
			var err error
			if events, err = appendEvents(ctx, tx, []sessionEvents{{p.ID, evs}}); err != nil {
				return err
			}
		}
		var err error
		s, err = sessionGet(ctx, tx, p.ID)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("session update: %w", err)
	}
	return s, events, nil
}

// SessionTouch counts a request made under the session.
func (db *DB) SessionTouch(ctx context.Context, p *store.SessionTouchParams) error {
	return db.tx(ctx, func(ctx context.Context, tx *txn) error {
		// A request without an identity (internal routes) keeps the last one.
		tag, err := tx.Exec(ctx, `UPDATE sessions SET request_count = request_count + 1, last_active_at = $1,
			caller_user = COALESCE(NULLIF($2, ''), caller_user), caller_key_id = COALESCE(NULLIF($3, ''), caller_key_id)
			WHERE id = $4`, utc(time.Now()), p.CallerUser, p.CallerKeyID, p.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("session %s: %w", p.ID, store.ErrNotFound)
		}
		return nil
	})
}

// SessionTurnHeartbeat refreshes a turn's heartbeat.
func (db *DB) SessionTurnHeartbeat(ctx context.Context, sessionID, turnID string, now time.Time) (string, error) {
	var cancel string
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		err := tx.QueryRow(ctx, `UPDATE sessions SET turn_heartbeat_at = $1 WHERE id = $2 AND active_run_id = $3
			RETURNING turn_cancel`, utc(nowOr(now)), sessionID, turnID).Scan(&cancel)
		if isNoRows(err) {
			return fmt.Errorf("%w: session %s is not running %s", store.ErrConflict, sessionID, turnID)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("session turn heartbeat: %w", err)
	}
	return cancel, nil
}

// SessionTurnCancel records a cancel request for a turn and tells every
// replica at commit, so the one answering it stops at once.
func (db *DB) SessionTurnCancel(ctx context.Context, sessionID, turnID, reason string) error {
	return db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET turn_cancel = $1 WHERE id = $2 AND active_run_id = $3`, reason, sessionID, turnID)
		if err != nil {
			return fmt.Errorf("session turn cancel: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: session %s is not running %s", store.ErrConflict, sessionID, turnID)
		}
		for _, n := range cancelNotices([]string{turnID}, reason) {
			tx.notifyWork(n)
		}
		return nil
	})
}

// SessionTurnsInterrupt settles turns whose process stopped proving alive.
func (db *DB) SessionTurnsInterrupt(ctx context.Context, staleBefore time.Time, reason string) (int64, error) {
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET active_run_id = '', turn_heartbeat_at = NULL, turn_cancel = '',
			status = $1, done_reason = $2 WHERE active_run_id <> '' AND (turn_heartbeat_at IS NULL OR turn_heartbeat_at < $3)`,
			store.SessionFailed, reason, staleBefore)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("session turns interrupt: %w", err)
	}
	return n, nil
}

// EventList reads a transcript through session_events_session_ts (or
// session_events_type when filtering by type).
func (db *DB) EventList(ctx context.Context, p *store.EventListParams) ([]*store.Event, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 200
	}
	args := []any{p.SessionID, utc(p.After)}
	query := `SELECT id, session_id, ts, type, actor, payload FROM session_events WHERE session_id = $1 AND ts > $2`
	if !p.Until.IsZero() {
		args = append(args, utc(p.Until))
		query += fmt.Sprintf(` AND ts <= $%d`, len(args))
	}
	if types := store.Distinct(p.Types); len(types) > 0 {
		args = append(args, types)
		query += fmt.Sprintf(` AND type = ANY ($%d)`, len(args))
	}
	dir := "ASC"
	if p.Newest {
		dir = "DESC"
	}
	args = append(args, limit)
	query += fmt.Sprintf(` ORDER BY ts %s LIMIT $%d`, dir, len(args))
	out, err := queryAll(ctx, db.pool, scanEvent, query, args...)
	if err != nil {
		return nil, fmt.Errorf("event list: %w", err)
	}
	if p.Newest {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

func scanEvent(row scanner) (*store.Event, error) {
	var (
		e       store.Event
		payload string
	)
	if err := row.Scan(&e.ID, &e.SessionID, &e.TS, &e.Type, &e.Actor, &payload); err != nil {
		return nil, err
	}
	e.Payload = decodeMap(payload)
	return &e, nil
}

// cloneStamp copies a payload and stamps key = v on the copy.
func cloneStamp(payload map[string]any, key string, v any) map[string]any {
	out := maps.Clone(payload)
	if out == nil {
		out = map[string]any{}
	}
	out[key] = v
	return out
}
