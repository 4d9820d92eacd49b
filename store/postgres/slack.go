package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// SlackInboxAdd stores deliveries in one transaction; ON CONFLICT DO
// NOTHING on the unique key makes a redelivery a no-op. A delivery is its
// thread's head if nothing else of the thread is pending.
func (db *DB) SlackInboxAdd(ctx context.Context, items []*store.SlackInboxAddParams) ([]bool, error) {
	added := make([]bool, len(items))
	if len(items) == 0 {
		return added, nil
	}
	threads := make([]string, len(items))
	for i, it := range items {
		// A delivery without a thread is a thread of its own.
		if threads[i] = it.Thread; it.Thread == "" {
			threads[i] = "key:" + it.Key
		}
	}
	now := utc(time.Now())
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		lockKeysTx(tx, inboxThreadLocks, `SELECT unnest($1::text[])`, threads)
		stmts := make([]queuedExec, len(items))
		for i, it := range items {
			stmts[i] = queuedExec{sql: `INSERT INTO slack_inbox (key, kind, body, received_at, thread, head)
				VALUES ($1, $2, $3, $4, $5, NOT EXISTS (SELECT 1 FROM slack_inbox WHERE thread = $5 AND processed_at IS NULL))
				ON CONFLICT (key) DO NOTHING`, args: []any{it.Key, it.Kind, it.Body, now, threads[i]}}
		}
		tags, err := tx.ExecEach(ctx, stmts)
		for i, tag := range tags {
			added[i] = tag.RowsAffected() == 1
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack inbox add: %w", err)
	}
	return added, nil
}

const inboxColumns = `id, key, kind, body, thread, received_at, attempts, holder, claim_seq`

func scanInbox(row scanner) (*store.SlackInboxItem, error) {
	var it store.SlackInboxItem
	if err := row.Scan(&it.ID, &it.Key, &it.Kind, &it.Body, &it.Thread, &it.ReceivedAt, &it.Attempts, &it.Claim.Holder, &it.Claim.Seq); err != nil {
		return nil, interpretError(err)
	}
	return &it, nil
}

// SlackInboxPending lists unprocessed deliveries, oldest first.
func (db *DB) SlackInboxPending(ctx context.Context, limit int) ([]*store.SlackInboxItem, error) {
	out, err := queryAll(ctx, db.pool, scanInbox, `SELECT `+inboxColumns+` FROM slack_inbox
		WHERE processed_at IS NULL ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("slack inbox pending: %w", err)
	}
	for _, it := range out {
		it.Claim = store.SlackClaim{}
	}
	return out, nil
}

// SlackInboxClaim claims each thread's oldest unprocessed delivery that is
// free. The heads come from the statement's snapshot; FOR UPDATE SKIP
// LOCKED passes over a head another replica is claiming, and the
// conditions on the row itself are checked again on its latest version, so
// a delivery processed or claimed since is never claimed twice (processing
// clears head in the same UPDATE). The condition is head alone, not also
// processed_at IS NULL: that would let the planner, before it has
// statistics, walk slack_inbox_pending_thread and sort every pending row.
func (db *DB) SlackInboxClaim(ctx context.Context, p *store.SlackClaimParams) ([]*store.SlackInboxItem, error) {
	var out []*store.SlackInboxItem
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		out, err = queryAll(ctx, tx, scanInbox, `WITH cand AS (
				SELECT id AS cid FROM slack_inbox
				WHERE head AND (claim_until IS NULL OR claim_until <= $3)
				ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
			UPDATE slack_inbox SET holder = $1, claim_seq = claim_seq + 1, claim_until = $2
			FROM cand WHERE id = cand.cid RETURNING `+inboxColumns, p.Holder, p.Until, p.Now, p.Limit)
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
	if err := db.tx(ctx, func(ctx context.Context, tx *txn) error { return claimSetTx(ctx, tx, id, query, args) }); err != nil {
		return fmt.Errorf("slack %s: %w", what, err)
	}
	return nil
}

func claimSetTx(ctx context.Context, tx *txn, id int64, query string, args []any) error {
	tag, err := tx.Exec(ctx, query, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("row %d is not pending under this claim: %w", id, store.ErrConflict)
	}
	return nil
}

// SlackInboxExtend moves a held claim's expiry.
func (db *DB) SlackInboxExtend(ctx context.Context, id int64, claim store.SlackClaim, until time.Time) error {
	return db.claimSet(ctx, "inbox extend", id, `UPDATE slack_inbox SET claim_until = $1
		WHERE id = $2 AND processed_at IS NULL AND holder = $3 AND claim_seq = $4`, until, id, claim.Holder, claim.Seq)
}

// SlackInboxRelease gives a claimed delivery back unprocessed.
func (db *DB) SlackInboxRelease(ctx context.Context, p *store.SlackInboxReleaseParams) error {
	return db.claimSet(ctx, "inbox release", p.ID, `UPDATE slack_inbox SET holder = '', claim_until = $1,
		attempts = attempts + CASE WHEN $2 THEN 1 ELSE 0 END, error = CASE WHEN $2 THEN $3 ELSE error END
		WHERE id = $4 AND processed_at IS NULL AND holder = $5 AND claim_seq = $6`,
		p.Next, p.Failed, p.Error, p.ID, p.Claim.Holder, p.Claim.Seq)
}

// inboxDoneTx marks a delivery processed and passes its thread's head on.
func inboxDoneTx(ctx context.Context, tx *txn, id int64, errMsg string) error {
	lockKeysTx(tx, inboxThreadLocks, `SELECT thread FROM slack_inbox WHERE id = $1`, id)
	tag, err := tx.Exec(ctx, `UPDATE slack_inbox SET processed_at = $1, error = $2, head = false WHERE id = $3 AND processed_at IS NULL`,
		utc(time.Now()), errMsg, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("inbox delivery %d: %w", id, store.ErrNotFound)
	}
	tx.later(nil, `UPDATE slack_inbox SET head = true WHERE id = (SELECT MIN(p.id) FROM slack_inbox p
		WHERE p.thread = (SELECT thread FROM slack_inbox WHERE id = $1) AND p.processed_at IS NULL) AND NOT head`, id)
	return nil
}

// lockKeysTx locks, in the lock space, the inbox threads or outbox queues
// the query (one text column) answers until the transaction ends, in key
// order. Marking a thread's head reads what else of the thread is pending,
// which a concurrent transaction may be changing unseen: a row arriving
// while its thread's head leaves pending would find the head still
// pending, the head's transaction would not yet see the new row, and the
// thread would be left with no head, never claimed again. Under the lock
// the second of the two sees the first's commit. The lock is sent with the
// next statement, which (a statement of its own, with its own snapshot)
// runs once it is held.
func lockKeysTx(tx *txn, space int, keys string, args ...any) {
	tx.later(nil, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(space)+`, k)
		FROM (SELECT DISTINCT hashtext(t) AS k FROM (`+keys+`) AS q(t) ORDER BY 1) AS keys`, args...)
}

// The first keys of lockKeysTx's advisory locks.
const (
	inboxThreadLocks = 0x48746872 // "Hthr"
	outboxQueueLocks = 0x48717565 // "Hque"
)

// SlackInboxDone marks a delivery processed.
func (db *DB) SlackInboxDone(ctx context.Context, id int64, errMsg string) error {
	if err := db.tx(ctx, func(ctx context.Context, tx *txn) error { return inboxDoneTx(ctx, tx, id, errMsg) }); err != nil {
		return fmt.Errorf("slack inbox done: %w", err)
	}
	return nil
}

// SlackInboxAppendEvent appends a transcript event and marks the delivery
// processed in one transaction; the mark is a compare-and-set, so two
// replicas processing one delivery append its line once.
func (db *DB) SlackInboxAppendEvent(ctx context.Context, inboxID int64, p *store.EventAppendParams) (*store.Event, error) {
	var ev *store.Event
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		if err := inboxDoneTx(ctx, tx, inboxID, ""); err != nil {
			return err
		}
		var err error
		ev, err = appendOne(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack inbox append event: %w", err)
	}
	return ev, nil
}

// SlackEventAppendOnce appends ev unless slack_event_lines records its line
// (the same Slack event, session and type) already. The record's primary
// key makes the check and the append atomic across replicas: a second
// transaction's insert waits for the first's and then finds the row.
func (db *DB) SlackEventAppendOnce(ctx context.Context, slackEventID string, p *store.EventAppendParams) (bool, error) {
	if slackEventID == "" {
		return false, fmt.Errorf("slack event append once: no slack event id")
	}
	q := *p
	q.Payload = cloneStamp(p.Payload, "slackEventId", slackEventID)
	added := false
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		added = false
		tag, err := tx.Exec(ctx, `INSERT INTO slack_event_lines (slack_event_id, session_id, type) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, slackEventID, q.SessionID, q.Type)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := appendOne(ctx, tx, &q); err != nil {
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

func outboxAddTx(ctx context.Context, tx *txn, msgs []*store.SlackOutboxAddParams) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	now := utc(time.Now())
	queues := make([]string, len(msgs))
	for i, m := range msgs {
		if m.DedupeKey == "" || m.Queue == "" || m.Channel == "" {
			return 0, fmt.Errorf("outbox message needs a dedupe key, queue and channel: %+v", m)
		}
		queues[i] = m.Queue
	}
	lockKeysTx(tx, outboxQueueLocks, `SELECT unnest($1::text[])`, queues)
	stmts := make([]queuedExec, len(msgs))
	for i, m := range msgs {
		// A message is its queue's head if nothing else of the queue is pending.
		stmts[i] = queuedExec{sql: `INSERT INTO slack_outbox
			(dedupe_key, queue, method, channel, thread_ts, recipient, text, blocks, ref_key, trace_context, response_url, next_at, created_at, head)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12, $11, $11,
				NOT EXISTS (SELECT 1 FROM slack_outbox WHERE queue = $2 AND status = 'pending'))
			ON CONFLICT (dedupe_key) DO NOTHING`,
			args: []any{m.DedupeKey, m.Queue, m.Method, m.Channel, m.ThreadTS, m.User, m.Text, m.Blocks, m.RefKey, m.TraceContext, now, m.ResponseURL}}
	}
	tags, err := tx.ExecEach(ctx, stmts)
	if err != nil {
		return 0, err
	}
	added := 0
	for _, tag := range tags {
		added += int(tag.RowsAffected())
	}
	return added, nil
}

// SlackOutboxAdd queues Slack writes, skipping dedupe keys already queued.
func (db *DB) SlackOutboxAdd(ctx context.Context, msgs []*store.SlackOutboxAddParams) (int, error) {
	var n int
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		n, err = outboxAddTx(ctx, tx, msgs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("slack outbox add: %w", err)
	}
	return n, nil
}

const outboxColumns = `id, dedupe_key, queue, method, channel, thread_ts, recipient, text, blocks, ref_key, trace_context, response_url, status, attempts,
	next_at, last_error, sent_ts, created_at, sent_at, attempted_at, holder, claim_seq, claim_until`

func scanOutbox(row scanner) (*store.SlackOutboxMsg, error) {
	var m store.SlackOutboxMsg
	if err := row.Scan(&m.ID, &m.DedupeKey, &m.Queue, &m.Method, &m.Channel, &m.ThreadTS, &m.User, &m.Text, &m.Blocks,
		&m.RefKey, &m.TraceContext, &m.ResponseURL, &m.Status, &m.Attempts, &m.NextAt, &m.LastError, &m.SentTS, &m.CreatedAt, &m.SentAt, &m.AttemptedAt,
		&m.Claim.Holder, &m.Claim.Seq, &m.ClaimUntil); err != nil {
		return nil, interpretError(err)
	}
	return &m, nil
}

// SlackOutboxClaim claims each due, free queue head: a queue's oldest
// pending message, marked as the inbox's heads are (see SlackInboxClaim
// for why the snapshot's heads are safe to claim).
func (db *DB) SlackOutboxClaim(ctx context.Context, p *store.SlackClaimParams) ([]*store.SlackOutboxMsg, error) {
	var out []*store.SlackOutboxMsg
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		out, err = queryAll(ctx, tx, scanOutbox, `WITH cand AS (
				SELECT id AS cid FROM slack_outbox
				WHERE head AND next_at <= $3 AND (claim_until IS NULL OR claim_until <= $3)
				ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
			UPDATE slack_outbox SET holder = $1, claim_seq = claim_seq + 1, claim_until = $2
			FROM cand WHERE id = cand.cid RETURNING `+outboxColumns, p.Holder, p.Until, p.Now, p.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack outbox claim: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.SlackOutboxMsg) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// SlackOutboxNextDue answers when the earliest queue head is due (a held
// one when its claim lapses).
func (db *DB) SlackOutboxNextDue(ctx context.Context) (time.Time, error) {
	var next *time.Time
	if err := db.pool.QueryRow(ctx, `SELECT MIN(GREATEST(next_at, claim_until)) FROM slack_outbox
		WHERE head`).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("slack outbox next due: %w", interpretError(err))
	}
	if next == nil {
		return time.Time{}, fmt.Errorf("slack outbox next due: %w", store.ErrNotFound)
	}
	return *next, nil
}

// SlackOutboxGetByKey reads a message by dedupe key.
func (db *DB) SlackOutboxGetByKey(ctx context.Context, key string) (*store.SlackOutboxMsg, error) {
	m, err := scanOutbox(db.pool.QueryRow(ctx, `SELECT `+outboxColumns+` FROM slack_outbox WHERE dedupe_key = $1`, key))
	if err != nil {
		return nil, fmt.Errorf("slack outbox message %q: %w", key, err)
	}
	return m, nil
}

// The fence of a claimed message's writes ($1 id, $2 holder, $3 seq).
const outboxClaimed = `id = $1 AND status = 'pending' AND holder = $2 AND claim_seq = $3`

// SlackOutboxAttempt records that a post of a claimed message is starting,
// keeping the first attempt's time; only before the claim lapses.
func (db *DB) SlackOutboxAttempt(ctx context.Context, id int64, claim store.SlackClaim) error {
	return db.claimSet(ctx, "outbox attempt", id, `UPDATE slack_outbox SET attempted_at = COALESCE(attempted_at, $4)
		WHERE `+outboxClaimed+` AND claim_until > $4`, id, claim.Holder, claim.Seq, utc(time.Now()))
}

// SlackOutboxSent records a delivered message and its ts.
func (db *DB) SlackOutboxSent(ctx context.Context, id int64, claim store.SlackClaim, ts string) error {
	return db.outboxSettle(ctx, "outbox sent", id, `UPDATE slack_outbox SET status = 'sent', attempts = attempts + 1, sent_ts = $4,
		sent_at = $5, last_error = '', holder = '', claim_until = NULL, head = false WHERE `+outboxClaimed,
		id, claim.Holder, claim.Seq, ts, utc(time.Now()))
}

// outboxSettle runs a claimed message's last write (see claimSet) and
// passes its queue's head on, under the queue's lock (see lockKeysTx).
func (db *DB) outboxSettle(ctx context.Context, what string, id int64, query string, args ...any) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		lockKeysTx(tx, outboxQueueLocks, `SELECT queue FROM slack_outbox WHERE id = $1`, id)
		if err := claimSetTx(ctx, tx, id, query, args); err != nil {
			return err
		}
		tx.later(nil, `UPDATE slack_outbox SET head = true WHERE id = (SELECT MIN(p.id) FROM slack_outbox p
			WHERE p.queue = (SELECT queue FROM slack_outbox WHERE id = $1) AND p.status = 'pending') AND NOT head`, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("slack %s: %w", what, err)
	}
	return nil
}

// SlackOutboxRetry records a failed attempt and the next one's time, and
// gives up the claim.
func (db *DB) SlackOutboxRetry(ctx context.Context, id int64, claim store.SlackClaim, next time.Time, errMsg string) error {
	return db.claimSet(ctx, "outbox retry", id, `UPDATE slack_outbox SET attempts = attempts + 1, next_at = $4, last_error = $5,
		holder = '', claim_until = NULL WHERE `+outboxClaimed, id, claim.Holder, claim.Seq, next, errMsg)
}

// SlackOutboxFail marks a message failed for good, keeping it and its error.
func (db *DB) SlackOutboxFail(ctx context.Context, id int64, claim store.SlackClaim, errMsg string) error {
	return db.outboxSettle(ctx, "outbox fail", id, `UPDATE slack_outbox SET status = 'failed', attempts = attempts + 1, last_error = $4,
		holder = '', claim_until = NULL, head = false WHERE `+outboxClaimed, id, claim.Holder, claim.Seq, errMsg)
}

// SlackOutboxExtend moves a held claim's expiry.
func (db *DB) SlackOutboxExtend(ctx context.Context, id int64, claim store.SlackClaim, until time.Time) error {
	return db.claimSet(ctx, "outbox extend", id, `UPDATE slack_outbox SET claim_until = $4 WHERE `+outboxClaimed,
		id, claim.Holder, claim.Seq, until)
}

// SlackOutboxRelease gives up a claim, recording nothing else.
func (db *DB) SlackOutboxRelease(ctx context.Context, id int64, claim store.SlackClaim) error {
	return db.claimSet(ctx, "outbox release", id, `UPDATE slack_outbox SET holder = '', claim_until = NULL WHERE `+outboxClaimed,
		id, claim.Holder, claim.Seq)
}

// SlackMirrorEvents lists events of Slack-tagged sessions after afterID.
// Event ids commit in id order (see flushEventsQuery), so a cursor past id n
// never skips an event committed later.
func (db *DB) SlackMirrorEvents(ctx context.Context, afterID int64, limit int) ([]*store.SlackMirrorEvent, error) {
	out, err := queryAll(ctx, db.pool, func(row scanner) (*store.SlackMirrorEvent, error) {
		var (
			ev      store.SlackMirrorEvent
			payload string
		)
		if err := row.Scan(&ev.ID, &ev.SessionID, &ev.TS, &ev.Type, &ev.Actor, &payload, &ev.Tag); err != nil {
			return nil, err
		}
		ev.Payload = decodeMap(payload)
		return &ev, nil
	}, `SELECT e.id, e.session_id, e.ts, e.type, e.actor, e.payload, t.tag
		FROM session_events e JOIN session_tags t ON t.session_id = e.session_id
		WHERE e.id > $1 AND t.tag >= 'slack:' AND t.tag < 'slack;'
		ORDER BY e.id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("slack mirror events: %w", err)
	}
	return out, nil
}

// SlackMirrorCursor answers the mirror's cursor.
func (db *DB) SlackMirrorCursor(ctx context.Context) (int64, error) {
	var v int64
	err := db.pool.QueryRow(ctx, `SELECT value FROM slack_cursors WHERE name = 'mirror'`).Scan(&v)
	if isNoRows(err) {
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
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		if n, err = outboxAddTx(ctx, tx, msgs); err != nil {
			return err
		}
		tx.later(nil, `INSERT INTO slack_cursors (name, value) VALUES ('mirror', $1)
			ON CONFLICT (name) DO UPDATE SET value = GREATEST(slack_cursors.value, excluded.value)`, eventID)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("slack mirror advance: %w", err)
	}
	return n, nil
}

// SlackPrune deletes old processed deliveries and sent messages in batches
// of 500, each its own short transaction.
func (db *DB) SlackPrune(ctx context.Context, inboxBefore, outboxBefore time.Time) (int64, error) {
	var total int64
	for _, q := range []struct {
		query string
		arg   time.Time
	}{
		{`DELETE FROM slack_inbox WHERE id IN (SELECT id FROM slack_inbox
			WHERE processed_at IS NOT NULL AND received_at < $1 ORDER BY id LIMIT 500)`, inboxBefore},
		{`DELETE FROM slack_outbox WHERE id IN (SELECT id FROM slack_outbox
			WHERE status = 'sent' AND created_at < $1 AND dedupe_key NOT LIKE 'card:%' ORDER BY id LIMIT 500)`, outboxBefore},
	} {
		for {
			var n int64
			err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
				tag, err := tx.Exec(ctx, q.query, q.arg)
				n = tag.RowsAffected()
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
