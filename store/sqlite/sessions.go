package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const sessionColumns = `id, title, status, done_reason, origin, platform, tags, context, capabilities, archived,
	forked_from, policy, base_policy, request_count, caller_user, caller_key_id, created_by, active_run_id, turn_heartbeat_at, event_count, last_active_at, created_at`

func scanSession(row scanner) (*store.Session, error) {
	var (
		s                   store.Session
		tags, ctxJSON, caps string
		archived            int
		lastActive, created string
		turnBeat            sql.NullString
	)
	if err := row.Scan(&s.ID, &s.Title, &s.Status, &s.DoneReason, &s.Origin, &s.Platform, &tags, &ctxJSON, &caps,
		&archived, &s.ForkedFrom, &s.Policy, &s.BasePolicy, &s.RequestCount, &s.CallerUser, &s.CallerKeyID, &s.CreatedBy, &s.ActiveRunID, &turnBeat,
		&s.EventCount, &lastActive, &created); err != nil {
		return nil, interpretError(err)
	}
	s.Tags, s.Capabilities = decodeStrings(tags), decodeStrings(caps)
	s.Context = map[string]any{}
	_ = json.Unmarshal([]byte(ctxJSON), &s.Context)
	s.Archived = archived != 0
	s.LastActiveAt, s.CreatedAt = parseTime(lastActive), parseTime(created)
	s.TurnHeartbeatAt = nullTime(turnBeat)
	return &s, nil
}

// SessionCreate inserts a session and claims its tags; a tag already held by
// another session is ErrConflict and nothing is written.
func (db *DB) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	id := store.NewID("ses")
	var s *store.Session
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		s, err = sessionCreateTx(ctx, tx, id, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session create: %w", err)
	}
	return s, nil
}

func sessionCreateTx(ctx context.Context, tx *sql.Tx, id string, p *store.SessionCreateParams) (*store.Session, error) {
	if err := sessionInsertTx(ctx, tx, id, p); err != nil {
		return nil, err
	}
	return sessionGet(ctx, tx, id)
}

// sessionInsertTx writes a session, its tags and first events; callers that
// need the row back read it (an enqueue that mints a session does not).
func sessionInsertTx(ctx context.Context, tx *sql.Tx, id string, p *store.SessionCreateParams) error {
	now := formatTime(time.Now())
	tags := store.Distinct(p.Tags)
	ctxMap := p.Context
	if ctxMap == nil {
		ctxMap = map[string]any{}
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	policy := p.Policy
	_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, title, origin, platform, tags, context, capabilities,
		forked_from, policy, base_policy, caller_user, caller_key_id, created_by, last_active_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		id, p.Title, p.Origin, p.Platform, encodeJSON(tags), encodeJSON(ctxMap), encodeJSON(caps),
		p.ForkedFrom, policy, policy, p.CallerUser, p.CallerKeyID, p.CreatedBy, now, now)
	if err != nil {
		return err
	}
	for _, t := range tags {
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_tags (tag, session_id) VALUES (?, ?)`, t, id); err != nil {
			if e := interpretError(err); e != err {
				return fmt.Errorf("%w: tag %q belongs to another session", store.ErrConflict, t)
			}
			return err
		}
	}
	for _, e := range p.Events {
		e.SessionID = id
		if _, err := eventAppendTx(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

func sessionGet(ctx context.Context, q queryRower, id string) (*store.Session, error) {
	s, err := scanSession(q.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if err != nil {
		return nil, err
	}
	if err := fillOpenHolds(ctx, q, []*store.Session{s}); err != nil {
		return nil, err
	}
	return s, nil
}

// SessionGetByID reads a session.
func (db *DB) SessionGetByID(ctx context.Context, id string) (*store.Session, error) {
	s, err := sessionGet(ctx, db.r, id)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return s, nil
}

// SessionGetBare reads the session row without counting its open holds.
func (db *DB) SessionGetBare(ctx context.Context, id string) (*store.Session, error) {
	s, err := scanSession(db.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return s, nil
}

// SessionGetByTag reads the session holding tag.
func (db *DB) SessionGetByTag(ctx context.Context, tag string) (*store.Session, error) {
	s, err := scanSession(db.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE id = (SELECT session_id FROM session_tags WHERE tag = ?)`, tag))
	if err == nil {
		err = fillOpenHolds(ctx, db.r, []*store.Session{s})
	}
	if err != nil {
		return nil, fmt.Errorf("session tagged %q: %w", tag, err)
	}
	return s, nil
}

// EventAppend appends an event in its own transaction.
func (db *DB) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.Event, error) {
	var ev *store.Event
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ev, err = eventAppendTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("event append: %w", err)
	}
	return ev, nil
}

// eventAppendTx appends an event inside a caller's transaction, so a state
// change and the transcript line recording it commit together. The ts is
// bumped past the session's newest event so ts is unique and increasing
// within a session, which makes `after` polling exact.
func eventAppendTx(ctx context.Context, tx *sql.Tx, p *store.EventAppendParams) (*store.Event, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	var last sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT MAX(ts) FROM session_events WHERE session_id = ?`, p.SessionID).Scan(&last); err != nil {
		return nil, err
	}
	if last.Valid {
		if lt := parseTime(last.String); !now.After(lt) {
			now = lt.Add(time.Microsecond)
		}
	}
	payload := p.Payload
	if payload == nil {
		payload = map[string]any{}
	}
	ts := formatTime(now)
	res, err := tx.ExecContext(ctx, `UPDATE sessions SET event_count = event_count + 1, last_active_at = ? WHERE id = ?`, ts, p.SessionID)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("session %s: %w", p.SessionID, store.ErrNotFound)
	}
	res, err = tx.ExecContext(ctx, `INSERT INTO session_events (session_id, ts, type, actor, payload) VALUES (?, ?, ?, ?, ?)`,
		p.SessionID, ts, p.Type, p.Actor, encodeJSON(payload))
	if err != nil {
		return nil, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	return &store.Event{ID: id, SessionID: p.SessionID, TS: now, Type: p.Type, Actor: p.Actor, Payload: payload}, nil
}
