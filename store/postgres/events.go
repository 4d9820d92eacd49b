package postgres

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-bot/holdfast/store"
)

// sessionEvents is one session's share of a multi-session append.
type sessionEvents struct {
	sessionID string
	events    []store.EventAppendParams
}

// appendEvents appends transcript lines for several sessions. One UPDATE
// bumps each session's counters and allocates its ts range from the
// session's last_event_ts: the row lock it takes orders concurrent appends
// to one session, and UPDATE reads the newest committed row, so ts is
// strictly increasing within a session across replicas. The rows themselves
// are inserted when the transaction commits (flushEventsQuery). Groups naming
// one session are merged, in order. Answers the events, whose ids are set
// once the transaction has flushed them.
func appendEvents(ctx context.Context, tx *txn, groups []sessionEvents) ([]*store.Event, error) {
	groups = mergeSessionGroups(groups)
	if len(groups) == 0 {
		return nil, nil
	}
	// Sessions in id order: two transactions appending to the same sessions
	// lock their rows in the same order.
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].sessionID < groups[j].sessionID })
	ids := make([]string, len(groups))
	counts := make([]int32, len(groups))
	for i, g := range groups {
		ids[i], counts[i] = g.sessionID, int32(len(g.events))
	}
	now := utc(time.Now())
	rows, err := tx.Query(ctx, `UPDATE sessions s SET event_count = s.event_count + u.n,
			last_event_ts = greatest($3::timestamptz, s.last_event_ts + interval '1 microsecond') + (u.n - 1) * interval '1 microsecond',
			last_active_at = greatest($3::timestamptz, s.last_event_ts + interval '1 microsecond') + (u.n - 1) * interval '1 microsecond'
		FROM unnest($1::text[], $2::int[]) AS u(id, n) WHERE s.id = u.id
		RETURNING s.id, s.last_event_ts`, ids, counts, now)
	if err != nil {
		return nil, err
	}
	last := make(map[string]time.Time, len(groups))
	for rows.Next() {
		var (
			id string
			ts time.Time
		)
		if err := rows.Scan(&id, &ts); err != nil {
			rows.Close()
			return nil, err
		}
		last[id] = ts
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []*store.Event
	for _, g := range groups {
		end, ok := last[g.sessionID]
		if !ok {
			return nil, fmt.Errorf("session %s: %w", g.sessionID, store.ErrNotFound)
		}
		start := end.Add(-time.Duration(len(g.events)-1) * time.Microsecond)
		for i, p := range g.events {
			payload := p.Payload
			if payload == nil {
				payload = map[string]any{}
			}
			ev := &store.Event{SessionID: g.sessionID, TS: start.Add(time.Duration(i) * time.Microsecond),
				Type: p.Type, Actor: p.Actor, Payload: payload}
			tx.pending = append(tx.pending, &pendingEvent{ev: ev})
			out = append(out, ev)
		}
	}
	return out, nil
}

// appendOne appends one event (p.SessionID's) and answers it.
func appendOne(ctx context.Context, tx *txn, p *store.EventAppendParams) (*store.Event, error) {
	evs, err := appendEvents(ctx, tx, []sessionEvents{{p.SessionID, []store.EventAppendParams{*p}}})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("session %q: %w", p.SessionID, store.ErrNotFound)
	}
	return evs[0], nil
}

// appendEventList appends lines for one session.
func appendEventList(ctx context.Context, tx *txn, sessionID string, evs []store.EventAppendParams) error {
	_, err := appendEvents(ctx, tx, []sessionEvents{{sessionID, evs}})
	return err
}

// mergeSessionGroups folds groups of one session into its first group,
// keeping every event's relative order; groups without a session or events
// are dropped. An event naming another session than its group's goes to
// its own session's group.
func mergeSessionGroups(groups []sessionEvents) []sessionEvents {
	out := make([]sessionEvents, 0, len(groups))
	at := make(map[string]int, len(groups))
	for _, g := range groups {
		for _, ev := range g.events {
			sid := g.sessionID
			if ev.SessionID != "" {
				sid = ev.SessionID
			}
			if sid == "" {
				continue
			}
			i, ok := at[sid]
			if !ok {
				i = len(out)
				at[sid] = i
				out = append(out, sessionEvents{sessionID: sid})
			}
			out[i].events = append(slices.Clip(out[i].events), ev)
		}
	}
	return out
}

// lockEvents takes the transaction-level lock under which event rows are
// inserted: held from the insert to the commit, it makes event ids commit
// in id order (see the package comment).
func (t *txn) lockEvents(ctx context.Context) error {
	_, err := t.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, t.db.eventsLockKey)
	return err
}

// flushEventsQuery is the statement that inserts the transaction's
// pending events, sent with its COMMIT: last in the transaction and under
// the events lock. It also queues the notice EventSubscribe's listeners get
// when it commits.
func (t *txn) flushEventsQuery() (string, []any) {
	n := len(t.pending)
	var (
		sids, types, actors, payloads = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		tss                           = make([]time.Time, n)
	)
	for i, p := range t.pending {
		sids[i], tss[i], types[i], actors[i], payloads[i] = p.ev.SessionID, p.ev.TS, p.ev.Type, p.ev.Actor, encodeJSON(p.ev.Payload)
	}
	// The lock is taken in the statement that inserts, before its first row
	// (and so its first id) is made.
	// The notice goes in the same statement: pg_notify runs once, over the
	// ids inserted, and is delivered at commit.
	return `WITH ins AS (
			INSERT INTO session_events (session_id, ts, type, actor, payload)
			SELECT u.sid, u.ts, u.typ, u.actor, u.payload
			FROM (SELECT pg_advisory_xact_lock($1)) AS l,
				unnest($2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(sid, ts, typ, actor, payload, ord)
			ORDER BY u.ord
			RETURNING id)
		SELECT ins.id FROM ins, (SELECT pg_notify($7, MAX(id)::text) FROM ins) AS notice ORDER BY ins.id`,
		[]any{t.db.eventsLockKey, sids, tss, types, actors, payloads, t.db.eventsChannel}
}

// readEventIDs fills in the pending events' ids from flushEventsQuery's
// rows.
func (t *txn) readEventIDs(rows pgx.Rows) error {
	n := len(t.pending)
	i := 0
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		if i < n {
			t.pending[i].ev.ID = id
		}
		i++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if i != n {
		return fmt.Errorf("events: %d inserted, %d expected", i, n)
	}
	t.pending = t.pending[:0]
	return nil
}
