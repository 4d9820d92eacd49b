package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// SessionList pages sessions newest activity first. Each origin is its own
// index range (sessions_listing) read in order and cut at the limit, and the
// arms are merged: a page costs about limit×origins index rows however large
// the table is or however rare an origin is. A text filter the trigram index
// can answer drives from that index instead (searchListQuery).
func (db *DB) SessionList(ctx context.Context, p *store.SessionListParams) ([]*store.Session, error) {
	if len(p.Origins) == 0 {
		return []*store.Session{}, nil
	}
	var (
		out []*store.Session
		err error
	)
	// Any filter text is valid and its cost bounded (SPEC §7): it is
	// cleaned and capped here, once, for both query shapes.
	clean := *p
	clean.Query = store.CleanSearchText(p.Query)
	p = &clean
	if q := p.Query; len([]rune(q)) >= 3 {
		out, err = db.searchList(ctx, p, q)
	} else {
		query, allArgs := sessionListQuery(p)
		out, err = queryAll(ctx, db.r, scanSession, query, allArgs...)
	}
	if err != nil {
		return nil, fmt.Errorf("session list: %w", err)
	}
	if err := fillOpenHolds(ctx, db.r, out); err != nil {
		return nil, fmt.Errorf("session list: %w", err)
	}
	return out, nil
}

// ftsPhrase quotes q as one FTS5 phrase: with the trigram tokenizer that is a
// case-insensitive substring match, punctuation included.
func ftsPhrase(q string) string {
	return `"` + strings.ReplaceAll(strings.TrimSpace(q), `"`, `""`) + `"`
}

// sessionListQuery builds the listing: one arm per origin, each a range of
// sessions_listing cut at the limit, merged newest first. A text filter of
// three characters or more (what a trigram can match) is answered by
// searchList instead; shorter ones test each row of the walk.
func sessionListQuery(p *store.SessionListParams) (string, []any) {
	limit := listLimit(p)
	q := strings.TrimSpace(p.Query)
	origins := store.Distinct(p.Origins)
	var (
		where []string
		args  []any
	)
	if !p.IncludeArchived {
		where = append(where, "archived = 0")
	}
	if q != "" {
		pat := "%" + likeEscape(q) + "%"
		where = append(where, `(title LIKE ? ESCAPE '\' OR `+searchTagsSQL+` LIKE ? ESCAPE '\')`)
		args = append(args, pat, pat)
	}
	if p.After != nil {
		where = append(where, "(last_active_at, id) < (?, ?)")
		args = append(args, formatTime(p.After.LastActiveAt), p.After.ID)
	}
	cond := ""
	for _, w := range where {
		cond += " AND " + w
	}
	const order = ` ORDER BY last_active_at DESC, id DESC LIMIT ?`
	arm := `SELECT ` + sessionColumns + ` FROM sessions INDEXED BY sessions_listing
		WHERE origin = ? AND event_count > 0` + cond + order
	if len(origins) == 1 {
		return arm, append(append([]any{origins[0]}, args...), limit)
	}
	// Several origins: each arm reads only keys from the index (covering,
	// unless a LIKE needs the row), the merge keeps the newest limit, and
	// only those rows are fetched whole.
	keyArm := `SELECT rowid AS k, last_active_at, id FROM sessions INDEXED BY sessions_listing
		WHERE origin = ? AND event_count > 0` + cond + order
	var allArgs []any
	arms := make([]string, len(origins))
	for i, o := range origins {
		arms[i] = `SELECT * FROM (` + keyArm + `)`
		allArgs = append(append(append(allArgs, o), args...), limit)
	}
	cols := strings.Fields(strings.ReplaceAll(sessionColumns, ",", " "))
	return `SELECT s.` + strings.Join(cols, ", s.") + ` FROM (` + strings.Join(arms, " UNION ALL ") + order + `) AS page
		CROSS JOIN sessions AS s ON s.rowid = page.k ORDER BY page.last_active_at DESC, page.id DESC`, append(allArgs, limit)
}

// searchTagsSQL is a session's tags as the text filter sees them: the tags
// column with every engine-minted workflow:<item id> tag reduced to
// "workflow:" (migration 028 indexes exactly this), so the short-query scan
// and the trigram index answer alike.
const searchTagsSQL = `CASE WHEN instr(tags, '"workflow:itm_') = 0 THEN tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(tags)) END`

// A session's sessions_search key (migration 013) is (searchEpoch - minute of
// last activity) << searchMinuteShift | sessions.rowid: ascending keys run
// newest minute first, the direction FTS5 walks cheaply.
const (
	searchMinuteShift = 32
	searchEpoch       = 1 << 30
)

func listLimit(p *store.SessionListParams) int {
	if p.Limit <= 0 {
		return 50
	}
	return p.Limit
}

// searchStreamSlack is how many matches past the page's limit searchList
// reads one by one to finish the oldest minute; a minute denser than that is
// sorted inside SQLite instead.
const searchStreamSlack = 64

// searchList answers a text filter from sessions_search, whose keys order
// matches newest minute first. It walks matches in key order until `limit`
// of them pass the other filters; every session of the page is then in that
// match's minute or a newer one, so it reads on to the end of that minute,
// then fetches those sessions and sorts them exactly. A page costs about
// limit plus one minute's matches, whether the query matches ten sessions or
// most of them, recent or old, and usually searches the trigram index once;
// a minute with more than searchStreamSlack further matches is bounded and
// sorted by a second search instead of row by row here. One snapshot.
func (db *DB) searchList(ctx context.Context, p *store.SessionListParams, q string) ([]*store.Session, error) {
	limit := listLimit(p)
	release, err := db.searchSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	tx, err := db.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	from, args := searchMatches(p, q)
	rows, err := tx.QueryContext(ctx, `SELECT f.rowid, s.rowid`+from+` ORDER BY f.rowid`, args...)
	if err != nil {
		return nil, err
	}
	page, end, dense, err := readSearchPage(rows, limit)
	if err != nil {
		return nil, err
	}
	if dense {
		return queryAll(ctx, tx, scanSession, searchDenseQuery(from), append(args, end, limit)...)
	}
	if len(page) == 0 {
		return []*store.Session{}, nil
	}
	return queryAll(ctx, tx, scanSession, searchPageQuery, encodeJSON(page), limit)
}

// searchPageQuery fetches a text filter's candidates by rowid, newest first.
const searchPageQuery = `SELECT ` + sessionColumns + ` FROM sessions WHERE rowid IN (SELECT value FROM json_each(?))
	ORDER BY last_active_at DESC, id DESC LIMIT ?`

// searchDenseQuery reads the matches of searchMatches up to a key bound and
// sorts them, newest first.
func searchDenseQuery(from string) string {
	cols := strings.Fields(strings.ReplaceAll(sessionColumns, ",", " "))
	return `SELECT s.` + strings.Join(cols, ", s.") + from + ` AND f.rowid < ? ORDER BY s.last_active_at DESC, s.id DESC LIMIT ?`
}

// searchMatches is the FROM and WHERE of the matches of q that pass the
// listing's other filters, as sessions_search f joined to sessions s. A
// cursor also skips the minutes newer than its own.
func searchMatches(p *store.SessionListParams, q string) (string, []any) {
	origins := store.Distinct(p.Origins)
	from := ` FROM sessions_search AS f CROSS JOIN sessions AS s ON s.rowid = f.rowid & ` +
		fmt.Sprint(int64(1)<<searchMinuteShift-1) + `
		WHERE f.sessions_search MATCH ? AND s.origin IN (?` + strings.Repeat(", ?", len(origins)-1) + `) AND s.event_count > 0`
	args := []any{ftsPhrase(q)}
	for _, o := range origins {
		args = append(args, o)
	}
	if !p.IncludeArchived {
		from += ` AND s.archived = 0`
	}
	if p.After != nil {
		from += ` AND f.rowid >= ? AND (s.last_active_at, s.id) < (?, ?)`
		args = append(args, (searchEpoch-p.After.LastActiveAt.Unix()/60)<<searchMinuteShift,
			formatTime(p.After.LastActiveAt), p.After.ID)
	}
	return from, args
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// SessionOpenHoldCounts answers open holds per session in one query.
func (db *DB) SessionOpenHoldCounts(ctx context.Context, ids []string) (map[string]int64, error) {
	out, err := openHoldCounts(ctx, db.r, ids)
	if err != nil {
		return nil, fmt.Errorf("open holds: %w", err)
	}
	return out, nil
}

// openHoldCounts counts open holds for a page of sessions in one grouped
// query over holds_session (session_id, status): one index range per id.
func openHoldCounts(ctx context.Context, q queryRower, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, store.HoldOpen)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := q.QueryContext(ctx, openHoldsQuery(len(ids)), args...)
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

func openHoldsQuery(n int) string {
	return `SELECT session_id, COUNT(*) FROM holds WHERE status = ? AND session_id IN (?` +
		strings.Repeat(", ?", n-1) + `) GROUP BY session_id`
}

// fillOpenHolds sets OpenHolds on a page of sessions with one query.
func fillOpenHolds(ctx context.Context, q queryRower, ss []*store.Session) error {
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

// SessionFork creates the fork, copies the events up to p.At (keeping their
// ts, taking new ids) with the posture the caller found in force at p.At, all in one
// transaction. Tags are not copied: a tag names exactly one session.
func (db *DB) SessionFork(ctx context.Context, p *store.SessionForkParams) (*store.Session, error) {
	at := formatTime(p.At)
	id := store.NewID("ses")
	var s *store.Session
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
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
		res, err := tx.ExecContext(ctx, `INSERT INTO session_events (session_id, ts, type, actor, payload)
			SELECT ?, ts, type, actor, payload FROM session_events WHERE session_id = ? AND ts <= ? ORDER BY ts`, id, src.ID, at)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		// The copied policy_set events replay the source's history, so the
		// fork starts, before them, from where the source started.
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET event_count = ?,
			base_policy = (SELECT base_policy FROM sessions WHERE id = ?) WHERE id = ?`, n, src.ID, id); err != nil {
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

// SessionUpdate applies p in one transaction.
func (db *DB) SessionUpdate(ctx context.Context, p *store.SessionUpdateParams) (*store.Session, []*store.Event, error) {
	var (
		s      *store.Session
		events []*store.Event
	)
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var current string
		if err := tx.QueryRowContext(ctx, `SELECT active_run_id FROM sessions WHERE id = ?`, p.ID).Scan(&current); err != nil {
			return fmt.Errorf("session %s: %w", p.ID, interpretError(err))
		}
		if p.ExpectActiveRunID != nil && *p.ExpectActiveRunID != current {
			return fmt.Errorf("%w: session %s has active run %q, not %q", store.ErrConflict, p.ID, current, *p.ExpectActiveRunID)
		}
		var (
			sets []string
			args []any
		)
		set := func(col string, v any) { sets = append(sets, col+" = ?"); args = append(args, v) }
		if p.ActiveRunID != nil {
			var beat any
			if *p.ActiveRunID != "" {
				beat = formatTime(time.Now())
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
			set("archived", boolInt(*p.Archived))
		}
		if p.Policy != nil {
			set("policy", *p.Policy)
		}
		if len(sets) > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE sessions SET `+strings.Join(sets, ", ")+` WHERE id = ?`, append(args, p.ID)...); err != nil {
				return err
			}
		}
		for _, e := range p.Events {
			e.SessionID = p.ID
			ev, err := eventAppendTx(ctx, tx, e)
			if err != nil {
				return err
			}
			events = append(events, ev)
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
	return db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// A request without an identity (internal routes) keeps the last one.
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET request_count = request_count + 1, last_active_at = ?,
			caller_user = COALESCE(NULLIF(?, ''), caller_user), caller_key_id = COALESCE(NULLIF(?, ''), caller_key_id)
			WHERE id = ?`, formatTime(time.Now()), p.CallerUser, p.CallerKeyID, p.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("session %s: %w", p.ID, store.ErrNotFound)
		}
		return nil
	})
}

// SessionTurnHeartbeat refreshes a turn's heartbeat.
func (db *DB) SessionTurnHeartbeat(ctx context.Context, sessionID, turnID string, now time.Time) (string, error) {
	var cancel string
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE sessions SET turn_heartbeat_at = ? WHERE id = ? AND active_run_id = ?
			RETURNING turn_cancel`, formatTime(nowOr(now)), sessionID, turnID).Scan(&cancel)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: session %s is not running %s", store.ErrConflict, sessionID, turnID)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("session turn heartbeat: %w", err)
	}
	return cancel, nil
}

// SessionTurnCancel records a cancel request for a turn; the notice after
// commit reaches the turn if this process runs it.
func (db *DB) SessionTurnCancel(ctx context.Context, sessionID, turnID, reason string) error {
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET turn_cancel = ? WHERE id = ? AND active_run_id = ?`, reason, sessionID, turnID)
		if err != nil {
			return fmt.Errorf("session turn cancel: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: session %s is not running %s", store.ErrConflict, sessionID, turnID)
		}
		return nil
	})
	if err == nil {
		db.work.notify(store.WorkNotice{Kind: store.WorkCancel, RunIDs: []string{turnID}, Reason: reason})
	}
	return err
}

// SessionTurnsInterrupt settles turns whose process stopped proving alive;
// it runs off the request path (a bounded scan of sessions with an active
// run).
func (db *DB) SessionTurnsInterrupt(ctx context.Context, staleBefore time.Time, reason string) (int64, error) {
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET active_run_id = '', turn_heartbeat_at = NULL, turn_cancel = '',
			status = ?, done_reason = ? WHERE active_run_id != '' AND (turn_heartbeat_at IS NULL OR turn_heartbeat_at < ?)`,
			store.SessionFailed, reason, formatTime(staleBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("session turns interrupt: %w", err)
	}
	return n, nil
}

// EventList reads a transcript through session_events_session_ts (or
// session_events_type when filtering by type): a page costs `limit` index
// rows whatever the transcript's length.
func (db *DB) EventList(ctx context.Context, p *store.EventListParams) ([]*store.Event, error) {
	query, args := eventListQuery(p)
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("event list: %w", err)
	}
	defer rows.Close()
	out := []*store.Event{}
	for rows.Next() {
		var (
			e           store.Event
			ts, payload string
		)
		if err := rows.Scan(&e.ID, &e.SessionID, &ts, &e.Type, &e.Actor, &payload); err != nil {
			return nil, fmt.Errorf("event list: %w", err)
		}
		e.TS = parseTime(ts)
		e.Payload = map[string]any{}
		_ = json.Unmarshal([]byte(payload), &e.Payload)
		out = append(out, &e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("event list: %w", err)
	}
	if p.Newest {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

func eventListQuery(p *store.EventListParams) (string, []any) {
	limit := p.Limit
	if limit <= 0 {
		limit = 200
	}
	query := `SELECT id, session_id, ts, type, actor, payload FROM session_events WHERE session_id = ? AND ts > ?`
	args := []any{p.SessionID, formatAfter(p.After)}
	if !p.Until.IsZero() {
		query += ` AND ts <= ?`
		args = append(args, formatAfter(p.Until))
	}
	if types := store.Distinct(p.Types); len(types) > 0 {
		query += ` AND type IN (?` + strings.Repeat(", ?", len(types)-1) + `)`
		for _, t := range types {
			args = append(args, t)
		}
	}
	dir := "ASC"
	if p.Newest {
		dir = "DESC"
	}
	return query + ` ORDER BY ts ` + dir + ` LIMIT ?`, append(args, limit)
}

// formatAfter is the exclusive lower bound for ts. Stored ts are whole
// microseconds, so truncating a finer bound keeps "ts > after" exact.
func formatAfter(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return formatTime(t.Truncate(time.Microsecond))
}

// readSearchPage reads a minute-keyed match stream (key, rowid), newest
// minute first: a page of limit rowids plus the rest of the last minute's,
// end the first key past that minute. dense says the minute holds more than
// searchStreamSlack further matches, and the caller should ask the index for
// the page by time instead. rows is closed.
func readSearchPage(rows *sql.Rows, limit int) (page []int64, end int64, dense bool, err error) {
	defer rows.Close()
	end = math.MaxInt64
	for rows.Next() {
		var key, rowid int64
		if err := rows.Scan(&key, &rowid); err != nil {
			return nil, 0, false, err
		}
		if key >= end {
			break
		}
		if len(page) == limit+searchStreamSlack {
			dense = true
			break
		}
		page = append(page, rowid)
		if len(page) == limit {
			end = (key>>searchMinuteShift + 1) << searchMinuteShift
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, false, err
	}
	return page, end, dense, rows.Close()
}
