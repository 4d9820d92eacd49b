package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast-bot/holdfast/store"
)

// txn is a write transaction and the transcript lines it appends, which are
// inserted when it commits (see flushEvents).
//
// Round trips are what a replica's throughput is bounded by once the
// database is on another machine (issue 14 asks for at most 12 per
// four-step run), so a txn pipelines what it can with pgx batches: BEGIN
// goes out with the first statement, COMMIT with the last (the event
// insert and the notices), and a statement whose only answer is its error
// (queued with later) goes out with the next one. PostgreSQL runs a
// pipeline's statements in order, each with its own READ COMMITTED
// snapshot, and skips the rest of it after an error, so a transaction
// still applies all of its statements or none, in the order they were
// written; only the moment an error is seen moves.
type txn struct {
	conn *pgxpool.Conn
	db   *DB
	// begun is set once BEGIN has been sent.
	begun   bool
	queued  []queuedExec
	pending []*pendingEvent
	// work is the NOTIFY payloads to send with the commit.
	work []string
}

type pendingEvent struct {
	ev *store.Event
}

// queuedExec is a statement sent with the transaction's next one; mapErr,
// when set, turns its error into the one its writer would have returned.
type queuedExec struct {
	sql    string
	args   []any
	mapErr func(error) error
}

// tx runs fn in one transaction. fn gets a context that never cancels:
// once a write starts it runs to the end (the caller's cancellation is
// honoured before it starts), so "returned" means committed or rolled back.
// fn may run more than once (a deadlock is retried), so it must set, never
// accumulate, what it reports to its caller. The error is fn's or the
// commit's, interpreted.
func (db *DB) tx(ctx context.Context, fn func(ctx context.Context, tx *txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx := context.WithoutCancel(ctx)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = db.txOnce(wctx, fn); err == nil || !retryable(err) {
			break
		}
	}
	return interpretError(err)
}

func (db *DB) txOnce(ctx context.Context, fn func(ctx context.Context, tx *txn) error) (err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection released inside a transaction (a failed rollback) is
	// closed by the pool rather than reused.
	defer conn.Release()
	t := &txn{conn: conn, db: db}
	defer func() {
		if err != nil && t.begun {
			_, _ = conn.Exec(ctx, "rollback")
		}
	}()
	if err := fn(ctx, t); err != nil {
		return err
	}
	return t.commit(ctx)
}

// notifyWork sends payload on the work channel when the transaction
// commits.
func (t *txn) notifyWork(payload string) { t.work = append(t.work, payload) }

// later queues a statement whose rows and tag nobody reads; it is sent
// with the transaction's next statement (or its commit), and its error is
// that statement's. Only for statements whose error their writer would
// return as it is (or as mapErr makes it): the next statement's caller
// sees it, and must not take it for its own.
func (t *txn) later(mapErr func(error) error, sql string, args ...any) {
	t.queued = append(t.queued, queuedExec{sql: sql, args: args, mapErr: mapErr})
}

// prefix queues BEGIN, when not yet sent, and the queued statements on b.
func (t *txn) prefix(b *pgx.Batch) (begin bool, queued []queuedExec) {
	begin, queued = !t.begun, t.queued
	if begin {
		b.Queue("begin")
	}
	for _, q := range queued {
		b.Queue(q.sql, q.args...)
	}
	t.begun, t.queued = true, nil
	return begin, queued
}

// readPrefix reads the results prefix queued.
func readPrefix(br pgx.BatchResults, begin bool, queued []queuedExec) error {
	if begin {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, q := range queued {
		if _, err := br.Exec(); err != nil {
			if q.mapErr != nil {
				err = q.mapErr(err)
			}
			return err
		}
	}
	return nil
}

// send sends sql with whatever must go before it; br is nil when nothing
// must (the caller then runs sql on the connection itself).
func (t *txn) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if t.begun && len(t.queued) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	begin, queued := t.prefix(b)
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if err := readPrefix(br, begin, queued); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// Exec runs a statement in the transaction.
func (t *txn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if br == nil {
		return t.conn.Exec(ctx, sql, args...)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// ExecEach runs statements one after another in one round trip, each with
// its own snapshot (so each sees the ones before it), and answers their
// tags; the first error ends it.
func (t *txn) ExecEach(ctx context.Context, stmts []queuedExec) ([]pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	begin, queued := t.prefix(b)
	for _, q := range stmts {
		b.Queue(q.sql, q.args...)
	}
	br := t.conn.SendBatch(ctx, b)
	defer br.Close()
	if err := readPrefix(br, begin, queued); err != nil {
		return nil, err
	}
	tags := make([]pgconn.CommandTag, len(stmts))
	for i := range stmts {
		tag, err := br.Exec()
		if err != nil {
			return nil, err
		}
		tags[i] = tag
	}
	return tags, br.Close()
}

// Query runs a query in the transaction.
func (t *txn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	if br == nil {
		return t.conn.Query(ctx, sql, args...)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs a query answering at most one row in the transaction.
func (t *txn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &txRow{rows: rows, err: err}
}

// commit sends the pending event rows, the notices and COMMIT in one
// batch. A transaction that sent nothing has nothing to commit.
func (t *txn) commit(ctx context.Context) error {
	if !t.begun && len(t.queued) == 0 && len(t.pending) == 0 && len(t.work) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	begin, queued := t.prefix(b)
	events := len(t.pending) > 0
	if events {
		sql, args := t.flushEventsQuery()
		b.Queue(sql, args...)
	}
	for _, w := range t.work {
		b.Queue(`SELECT pg_notify($1, $2)`, t.db.workChannel, w)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	err := t.readCommit(br, begin, queued, events)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *txn) readCommit(br pgx.BatchResults, begin bool, queued []queuedExec, events bool) error {
	if err := readPrefix(br, begin, queued); err != nil {
		return err
	}
	if events {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if err := t.readEventIDs(rows); err != nil {
			return err
		}
	}
	for range t.work {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	// COMMIT of a transaction that failed answers ROLLBACK, not an error.
	if tag.String() != "COMMIT" {
		return errors.New("postgres: the transaction was rolled back at commit")
	}
	return nil
}

// batchRows is a batch's last result: closing it closes the batch.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.closeErr = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// txRow is QueryRow's answer, as pgx's own: no row is pgx.ErrNoRows.
type txRow struct {
	rows pgx.Rows
	err  error
}

func (r *txRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
