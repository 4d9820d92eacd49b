package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// The Slack bridge's hot queries, kept here so a test can check their plans.
const (
	// Pending rows are few: they are read from the partial index and
	// sorted, never by walking the table's history in id order.
	inboxPendingQuery = `SELECT ` + inboxColumns + ` FROM slack_inbox INDEXED BY slack_inbox_pending_thread
		WHERE processed_at IS NULL ORDER BY id LIMIT ?`
	// A thread's head is its oldest unprocessed delivery; only heads are
	// claimed, which keeps a thread in arrival order across replicas. They
	// are marked (head = 1, see migration 032), so a claim walks the heads
	// in arrival order, never the deliveries queued behind them.
	inboxClaimQuery = `UPDATE slack_inbox SET holder = ?, claim_seq = claim_seq + 1, claim_until = ?
		WHERE id IN (SELECT id FROM slack_inbox INDEXED BY slack_inbox_heads
			WHERE head = 1 AND (claim_until IS NULL OR claim_until <= ?) ORDER BY id LIMIT ?)
		RETURNING ` + inboxColumns
	// A delivery is its thread's head if nothing else of the thread is
	// pending; processing the head makes the next one the head.
	inboxAddQuery = `INSERT OR IGNORE INTO slack_inbox (key, kind, body, received_at, thread, head)
		VALUES (?1, ?2, ?3, ?4, ?5, NOT EXISTS (SELECT 1 FROM slack_inbox WHERE thread = ?5 AND processed_at IS NULL))`
	// Given the id of a row just processed (two plain statements cost less
	// than reading its thread back with RETURNING).
	inboxNextHeadQuery = `UPDATE slack_inbox SET head = 1 WHERE id = (SELECT MIN(p.id) FROM slack_inbox p
		WHERE p.thread = (SELECT thread FROM slack_inbox WHERE id = ?) AND p.processed_at IS NULL) AND head = 0`
	// A queue's head is its oldest pending message; only heads are sent,
	// which is what keeps a thread in order. They are marked as the
	// inbox's are.
	outboxClaimQuery = `UPDATE slack_outbox SET holder = ?, claim_seq = claim_seq + 1, claim_until = ?
		WHERE id IN (SELECT id FROM slack_outbox INDEXED BY slack_outbox_heads
			WHERE head = 1 AND next_at <= ? AND (claim_until IS NULL OR claim_until <= ?) ORDER BY id LIMIT ?)
		RETURNING ` + outboxColumns
	// A held head is due when its claim lapses.
	outboxNextDueQuery = `SELECT MIN(MAX(next_at, COALESCE(claim_until, next_at))) FROM slack_outbox INDEXED BY slack_outbox_heads
		WHERE head = 1`
	// A message is its queue's head if nothing else of the queue is
	// pending; sending the head (or failing it) makes the next one the head.
	outboxAddQuery = `INSERT OR IGNORE INTO slack_outbox
		(dedupe_key, queue, method, channel, thread_ts, user, text, blocks, ref_key, trace_context, response_url, next_at, created_at, head)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?11, ?11,
			NOT EXISTS (SELECT 1 FROM slack_outbox WHERE queue = ?2 AND status = 'pending'))`
	outboxNextHeadQuery = `UPDATE slack_outbox SET head = 1 WHERE id = (SELECT MIN(p.id) FROM slack_outbox p
		WHERE p.queue = (SELECT queue FROM slack_outbox WHERE id = ?) AND p.status = 'pending') AND head = 0`
	// The CROSS JOIN keeps session_events the outer loop, walked by primary
	// key from the cursor, so the cost follows the events not yet mirrored.
	mirrorEventsQuery = `SELECT e.id, e.session_id, e.ts, e.type, e.actor, e.payload, t.tag
		FROM session_events e CROSS JOIN session_tags t
		WHERE e.id > ? AND t.session_id = e.session_id AND t.tag >= 'slack:' AND t.tag < 'slack;'
		ORDER BY e.id LIMIT ?`
)

// SlackInboxAdd stores deliveries in one transaction; INSERT OR IGNORE on the
// unique key makes a redelivery a no-op. A write (see DB.write): it sets
// added afresh if re-run, so a batch of deliveries needs no savepoints.
func (db *DB) SlackInboxAdd(ctx context.Context, items []*store.SlackInboxAddParams) ([]bool, error) {
	added := make([]bool, len(items))
	now := formatTime(time.Now())
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for i, it := range items {
			// A delivery without a thread is a thread of its own. Not
			// tx.Prepare: a statement prepared by hand bypasses the
			// driver's statement cache and is compiled again on every
			// delivery (3.5 % of the ingest benchmark's CPU).
			thread := it.Thread
			if thread == "" {
				thread = "key:" + it.Key
			}
			res, err := tx.ExecContext(ctx, inboxAddQuery, it.Key, it.Kind, it.Body, now, thread)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			added[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("slack inbox add: %w", err)
	}
	return added, nil
}

const inboxColumns = `id, key, kind, body, thread, received_at, attempts, holder, claim_seq`

func scanInbox(row scanner) (*store.SlackInboxItem, error) {
	var (
		it       store.SlackInboxItem
		received string
	)
	if err := row.Scan(&it.ID, &it.Key, &it.Kind, &it.Body, &it.Thread, &received, &it.Attempts, &it.Claim.Holder, &it.Claim.Seq); err != nil {
		return nil, interpretError(err)
	}
	it.ReceivedAt = parseTime(received)
	return &it, nil
}

// SlackInboxPending lists unprocessed deliveries, oldest first.
func (db *DB) SlackInboxPending(ctx context.Context, limit int) ([]*store.SlackInboxItem, error) {
	out, err := queryAll(ctx, db.r, scanInbox, inboxPendingQuery, limit)
	if err != nil {
		return nil, fmt.Errorf("slack inbox pending: %w", err)
	}
	for _, it := range out {
		it.Claim = store.SlackClaim{}
	}
	return out, nil
}

// SlackInboxClaim claims each thread's oldest unprocessed delivery that is
// free, in one UPDATE … RETURNING on the writer.
func (db *DB) SlackInboxClaim(ctx context.Context, p *store.SlackClaimParams) ([]*store.SlackInboxItem, error) {
	var out []*store.SlackInboxItem
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = queryAll(ctx, tx, scanInbox, inboxClaimQuery, p.Holder, formatTime(p.Until), formatTime(p.Now), p.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack inbox claim: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.SlackInboxItem) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// claimSet runs a write fenced by a claim; no row means the claim is no
// longer held.
func (db *DB) claimSet(ctx context.Context, what string, id int64, query string, args ...any) error {
	if err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return claimSetTx(ctx, tx, id, query, args) }); err != nil {
		return fmt.Errorf("slack %s: %w", what, err)
	}
	return nil
}

func claimSetTx(ctx context.Context, tx *sql.Tx, id int64, query string, args []any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("row %d is not pending under this claim: %w", id, store.ErrConflict)
	}
	return nil
}

// SlackInboxExtend moves a held claim's expiry.
func (db *DB) SlackInboxExtend(ctx context.Context, id int64, claim store.SlackClaim, until time.Time) error {
	return db.claimSet(ctx, "inbox extend", id, `UPDATE slack_inbox SET claim_until = ?
		WHERE id = ? AND processed_at IS NULL AND holder = ? AND claim_seq = ?`, formatTime(until), id, claim.Holder, claim.Seq)
}

// SlackInboxRelease gives a claimed delivery back unprocessed.
func (db *DB) SlackInboxRelease(ctx context.Context, p *store.SlackInboxReleaseParams) error {
	return db.claimSet(ctx, "inbox release", p.ID, `UPDATE slack_inbox SET holder = '', claim_until = ?,
		attempts = attempts + ?, error = CASE WHEN ? THEN ? ELSE error END
		WHERE id = ? AND processed_at IS NULL AND holder = ? AND claim_seq = ?`,
		formatTime(p.Next), b2i(p.Failed), p.Failed, p.Error, p.ID, p.Claim.Holder, p.Claim.Seq)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inboxDoneTx marks a delivery processed and passes its thread's head on.
func inboxDoneTx(ctx context.Context, tx *sql.Tx, id int64, errMsg string) error {
	res, err := tx.ExecContext(ctx, `UPDATE slack_inbox SET processed_at = ?, error = ?, head = 0 WHERE id = ? AND processed_at IS NULL`,
		formatTime(time.Now()), errMsg, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("inbox delivery %d: %w", id, store.ErrNotFound)
	}
	_, err = tx.ExecContext(ctx, inboxNextHeadQuery, id)
	return err
}

// SlackInboxDone marks a delivery processed.
func (db *DB) SlackInboxDone(ctx context.Context, id int64, errMsg string) error {
	if err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return inboxDoneTx(ctx, tx, id, errMsg) }); err != nil {
		return fmt.Errorf("slack inbox done: %w", err)
	}
	return nil
}

// SlackInboxAppendEvent appends a transcript event and marks the delivery
// processed in one transaction.
func (db *DB) SlackInboxAppendEvent(ctx context.Context, inboxID int64, p *store.EventAppendParams) (*store.Event, error) {
	var ev *store.Event
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := inboxDoneTx(ctx, tx, inboxID, ""); err != nil {
			return err
		}
		var err error
		ev, err = eventAppendTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack inbox append event: %w", err)
	}
	return ev, nil
}

// SlackEventAppendOnce appends ev unless slack_event_lines records its line
// (the same Slack event, session and type) already; the record and the
// append are one transaction.
func (db *DB) SlackEventAppendOnce(ctx context.Context, slackEventID string, p *store.EventAppendParams) (bool, error) {
	if slackEventID == "" {
		return false, fmt.Errorf("slack event append once: no slack event id")
	}
	q := *p
	q.Payload = maps.Clone(p.Payload)
	if q.Payload == nil {
		q.Payload = map[string]any{}
	}
	q.Payload["slackEventId"] = slackEventID
	added := false
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		added = false
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO slack_event_lines (slack_event_id, session_id, type) VALUES (?, ?, ?)`,
			slackEventID, q.SessionID, q.Type)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		if _, err := eventAppendTx(ctx, tx, &q); err != nil {
			return err
		}
		added = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("slack event append once: %w", err)
	}
	return added, nil
}

func outboxAddTx(ctx context.Context, tx *sql.Tx, msgs []*store.SlackOutboxAddParams) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	now := formatTime(time.Now())
	added := 0
	for _, m := range msgs {
		if m.DedupeKey == "" || m.Queue == "" || m.Channel == "" {
			return 0, fmt.Errorf("outbox message needs a dedupe key, queue and channel: %+v", m)
		}
		// Through the driver's statement cache (see SlackInboxAdd).
		res, err := tx.ExecContext(ctx, outboxAddQuery, m.DedupeKey, m.Queue, m.Method, m.Channel, m.ThreadTS, m.User, m.Text, m.Blocks, m.RefKey,
			m.TraceContext, now, m.ResponseURL)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		added += int(n)
	}
	return added, nil
}

// SlackOutboxAdd queues Slack writes, skipping dedupe keys already queued.
func (db *DB) SlackOutboxAdd(ctx context.Context, msgs []*store.SlackOutboxAddParams) (int, error) {
	var n int
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = outboxAddTx(ctx, tx, msgs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("slack outbox add: %w", err)
	}
	return n, nil
}

const outboxColumns = `id, dedupe_key, queue, method, channel, thread_ts, user, text, blocks, ref_key, trace_context, response_url, status,
	attempts, next_at, last_error, sent_ts, created_at, sent_at, attempted_at, holder, claim_seq, claim_until`

func scanOutbox(row scanner) (*store.SlackOutboxMsg, error) {
	var (
		m                            store.SlackOutboxMsg
		nextAt, created              string
		sentAt, attempted, claimedTo sql.NullString
	)
	if err := row.Scan(&m.ID, &m.DedupeKey, &m.Queue, &m.Method, &m.Channel, &m.ThreadTS, &m.User, &m.Text, &m.Blocks,
		&m.RefKey, &m.TraceContext, &m.ResponseURL, &m.Status, &m.Attempts, &nextAt, &m.LastError, &m.SentTS, &created, &sentAt, &attempted,
		&m.Claim.Holder, &m.Claim.Seq, &claimedTo); err != nil {
		return nil, interpretError(err)
	}
	m.NextAt, m.CreatedAt = parseTime(nextAt), parseTime(created)
	if sentAt.Valid {
		t := parseTime(sentAt.String)
		m.SentAt = &t
	}
	if attempted.Valid {
		t := parseTime(attempted.String)
		m.AttemptedAt = &t
	}
	if claimedTo.Valid {
		t := parseTime(claimedTo.String)
		m.ClaimUntil = &t
	}
	return &m, nil
}

// SlackOutboxClaim claims each due, free queue head in one UPDATE …
// RETURNING on the writer.
func (db *DB) SlackOutboxClaim(ctx context.Context, p *store.SlackClaimParams) ([]*store.SlackOutboxMsg, error) {
	var out []*store.SlackOutboxMsg
	now := formatTime(p.Now)
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = queryAll(ctx, tx, scanOutbox, outboxClaimQuery, p.Holder, formatTime(p.Until), now, now, p.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack outbox claim: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.SlackOutboxMsg) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// SlackOutboxNextDue answers when the earliest queue head is due.
func (db *DB) SlackOutboxNextDue(ctx context.Context) (time.Time, error) {
	var next sql.NullString
	if err := db.r.QueryRowContext(ctx, outboxNextDueQuery).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("slack outbox next due: %w", interpretError(err))
	}
	if !next.Valid {
		return time.Time{}, fmt.Errorf("slack outbox next due: %w", store.ErrNotFound)
	}
	return parseTime(next.String), nil
}

// SlackOutboxGetByKey reads a message by dedupe key.
func (db *DB) SlackOutboxGetByKey(ctx context.Context, key string) (*store.SlackOutboxMsg, error) {
	m, err := scanOutbox(db.r.QueryRowContext(ctx, `SELECT `+outboxColumns+` FROM slack_outbox WHERE dedupe_key = ?`, key))
	if err != nil {
		return nil, fmt.Errorf("slack outbox message %q: %w", key, err)
	}
	return m, nil
}

// The fence of a claimed message's writes.
const outboxClaimed = `id = ? AND status = 'pending' AND holder = ? AND claim_seq = ?`

// SlackOutboxAttempt records that a post of a claimed message is starting,
// keeping the first attempt's time; only before the claim lapses.
func (db *DB) SlackOutboxAttempt(ctx context.Context, id int64, claim store.SlackClaim) error {
	now := formatTime(time.Now())
	return db.claimSet(ctx, "outbox attempt", id, `UPDATE slack_outbox SET attempted_at = COALESCE(attempted_at, ?)
		WHERE `+outboxClaimed+` AND claim_until > ?`, now, id, claim.Holder, claim.Seq, now)
}

// SlackOutboxSent records a delivered message and its ts.
func (db *DB) SlackOutboxSent(ctx context.Context, id int64, claim store.SlackClaim, ts string) error {
	return db.outboxSettle(ctx, "outbox sent", id, `UPDATE slack_outbox SET status = 'sent', attempts = attempts + 1, sent_ts = ?,
		sent_at = ?, last_error = '', holder = '', claim_until = NULL, head = 0 WHERE `+outboxClaimed,
		ts, formatTime(time.Now()), id, claim.Holder, claim.Seq)
}

// outboxSettle runs a claimed message's last write (see claimSet) and
// passes its queue's head on.
func (db *DB) outboxSettle(ctx context.Context, what string, id int64, query string, args ...any) error {
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := claimSetTx(ctx, tx, id, query, args); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, outboxNextHeadQuery, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("slack %s: %w", what, err)
	}
	return nil
}

// SlackOutboxRetry records a failed attempt and the next one's time, and
// gives up the claim.
func (db *DB) SlackOutboxRetry(ctx context.Context, id int64, claim store.SlackClaim, next time.Time, errMsg string) error {
	return db.claimSet(ctx, "outbox retry", id, `UPDATE slack_outbox SET attempts = attempts + 1, next_at = ?, last_error = ?,
		holder = '', claim_until = NULL WHERE `+outboxClaimed, formatTime(next), errMsg, id, claim.Holder, claim.Seq)
}

// SlackOutboxFail marks a message failed for good, keeping it and its error.
func (db *DB) SlackOutboxFail(ctx context.Context, id int64, claim store.SlackClaim, errMsg string) error {
	return db.outboxSettle(ctx, "outbox fail", id, `UPDATE slack_outbox SET status = 'failed', attempts = attempts + 1, last_error = ?,
		holder = '', claim_until = NULL, head = 0 WHERE `+outboxClaimed, errMsg, id, claim.Holder, claim.Seq)
}

// SlackOutboxExtend moves a held claim's expiry.
func (db *DB) SlackOutboxExtend(ctx context.Context, id int64, claim store.SlackClaim, until time.Time) error {
	return db.claimSet(ctx, "outbox extend", id, `UPDATE slack_outbox SET claim_until = ? WHERE `+outboxClaimed,
		formatTime(until), id, claim.Holder, claim.Seq)
}

// SlackOutboxRelease gives up a claim, recording nothing else.
func (db *DB) SlackOutboxRelease(ctx context.Context, id int64, claim store.SlackClaim) error {
	return db.claimSet(ctx, "outbox release", id, `UPDATE slack_outbox SET holder = '', claim_until = NULL WHERE `+outboxClaimed,
		id, claim.Holder, claim.Seq)
}

// SlackMirrorEvents lists events of Slack-tagged sessions after afterID.
func (db *DB) SlackMirrorEvents(ctx context.Context, afterID int64, limit int) ([]*store.SlackMirrorEvent, error) {
	rows, err := db.r.QueryContext(ctx, mirrorEventsQuery, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("slack mirror events: %w", err)
	}
	defer rows.Close()
	var out []*store.SlackMirrorEvent
	for rows.Next() {
		var (
			ev          store.SlackMirrorEvent
			ts, payload string
		)
		if err := rows.Scan(&ev.ID, &ev.SessionID, &ts, &ev.Type, &ev.Actor, &payload, &ev.Tag); err != nil {
			return nil, fmt.Errorf("slack mirror events: %w", err)
		}
		ev.TS = parseTime(ts)
		ev.Payload = map[string]any{}
		_ = json.Unmarshal([]byte(payload), &ev.Payload)
		out = append(out, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("slack mirror events: %w", err)
	}
	return out, nil
}

// SlackMirrorCursor answers the mirror's cursor.
func (db *DB) SlackMirrorCursor(ctx context.Context) (int64, error) {
	var v int64
	err := db.r.QueryRowContext(ctx, `SELECT value FROM slack_cursors WHERE name = 'mirror'`).Scan(&v)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("slack mirror cursor: %w", err)
	}
	return v, nil
}

// SlackMirrorAdvance queues msgs and moves the cursor in one transaction.
func (db *DB) SlackMirrorAdvance(ctx context.Context, eventID int64, msgs []*store.SlackOutboxAddParams) (int, error) {
	var n int
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if n, err = outboxAddTx(ctx, tx, msgs); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO slack_cursors (name, value) VALUES ('mirror', ?)
			ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value)`, eventID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("slack mirror advance: %w", err)
	}
	return n, nil
}

// SlackPrune deletes old processed deliveries and sent messages in batches,
// oldest first; each batch is its own short transaction so the writer is
// never held for long.
func (db *DB) SlackPrune(ctx context.Context, inboxBefore, outboxBefore time.Time) (int64, error) {
	var total int64
	for _, q := range []struct {
		query string
		arg   string
	}{
		{`DELETE FROM slack_inbox WHERE id IN (SELECT id FROM slack_inbox
			WHERE processed_at IS NOT NULL AND received_at < ? ORDER BY id LIMIT 500)`, formatTime(inboxBefore)},
		{`DELETE FROM slack_outbox WHERE id IN (SELECT id FROM slack_outbox
			WHERE status = 'sent' AND created_at < ? AND dedupe_key NOT LIKE 'card:%' ORDER BY id LIMIT 500)`, formatTime(outboxBefore)},
	} {
		for {
			var n int64
			err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, q.query, q.arg)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return total, fmt.Errorf("slack prune: %w", err)
			}
			total += n
			if n < 500 {
				break
			}
		}
	}
	return total, nil
}
