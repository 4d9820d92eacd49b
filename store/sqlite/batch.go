package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Group commit. At synchronous=FULL every COMMIT waits for an fsync, so one
// transaction per write caps the whole service at a few thousand writes a
// second however many goroutines write. Instead every write function goes to
// one writer goroutine, which runs all the functions queued while the
// previous commit was syncing in ONE transaction, each inside its own
// SAVEPOINT: a function that fails is rolled back to its savepoint alone and
// gets its own error, the others commit together, and no caller is answered
// before the commit that holds its write is durable. A lone request pays
// nothing extra: nobody waits for company, the batch is whatever queued up.

// maxBatch bounds one transaction so that a flood of writers cannot make a
// single commit (and everyone's latency) arbitrarily long.
const maxBatch = 256

var errClosed = errors.New("sqlite: store is closed")

type writeReq struct {
	ctx  context.Context
	fn   func(tx *sql.Tx) error
	done chan error
	// rerun says fn may be run again after a rollback (see write).
	rerun bool
}

// write is tx for the engine's hot writes: fn may be run more than once. A
// batch made only of such functions runs without savepoints, and if one
// fails the whole transaction is rolled back and the batch re-run the
// careful way. So fn must set, never accumulate, what it reports to its
// caller. Savepoints are not free: each one makes FTS5 flush its pending
// terms into a new segment, so a batch of memo inserts would otherwise write
// one index segment per memo.
func (db *DB) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return db.submit(ctx, fn, true)
}

// tx runs fn in a write transaction, possibly shared with other callers'
// functions (see above). fn must do all its work through tx and must not call
// tx itself. The returned error is fn's (interpreted), or the commit's.
//
// fn gets a context that never cancels: once a write function starts it runs
// to the end (its caller's cancellation is honoured before it starts). That
// spares the single writer a goroutine per statement: go-sqlite3 runs a
// statement whose context can be cancelled on a goroutine of its own and
// waits for it, ~2 µs a statement.
func (db *DB) tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return db.submit(ctx, fn, false)
}

func (db *DB) submit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, rerun bool) error {
	wctx := context.WithoutCancel(ctx)
	req := &writeReq{ctx: ctx, fn: func(tx *sql.Tx) error { return fn(wctx, tx) }, done: make(chan error, 1), rerun: rerun}
	select {
	case db.writes <- req:
	case <-db.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once handed over the write always gets an answer: waiting here even if
	// ctx ends keeps "returned" meaning "committed or rolled back".
	return <-req.done
}

func (db *DB) writer() {
	defer db.writerWG.Done()
	batch := make([]*writeReq, 0, maxBatch)
	for {
		select {
		case req := <-db.writes:
			batch = append(batch[:0], req)
		case <-db.stop:
			db.drainClosed()
			return
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case req := <-db.writes:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		db.runBatch(batch)
		clear(batch)
	}
}

// drainClosed answers writes that raced with Close.
func (db *DB) drainClosed() {
	for {
		select {
		case req := <-db.writes:
			req.done <- errClosed
		default:
			return
		}
	}
}

func (db *DB) runBatch(batch []*writeReq) {
	results := make([]error, len(batch))
	finish := func(commitErr error) {
		for i, req := range batch {
			err := results[i]
			if err == nil {
				err = commitErr
			}
			req.done <- interpretError(err)
		}
	}
	commit := func(tx *sql.Tx) {
		err := tx.Commit()
		// Callers first: telling subscribers costs a query, and nobody
		// waiting on a write should wait for it.
		finish(err)
		if err == nil {
			db.events.committed(db.w)
		}
	}
	// The transaction is not bound to any one caller's context: one caller
	// giving up must not roll back the others' writes.
	ctx := context.Background()
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		finish(err)
		return
	}
	if len(batch) > 1 && rerunnable(batch) {
		if db.runOptimistic(tx, batch, results) {
			commit(tx)
			return
		}
		_ = tx.Rollback()
		clear(results)
		if tx, err = db.w.BeginTx(ctx, nil); err != nil {
			finish(err)
			return
		}
	}
	if len(batch) == 1 {
		req := batch[0]
		if err := req.ctx.Err(); err != nil {
			results[0] = err
		} else {
			results[0] = call(req.fn, tx)
		}
		if results[0] != nil {
			_ = tx.Rollback()
			finish(nil)
			return
		}
		commit(tx)
		return
	}
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		if _, err := tx.ExecContext(ctx, `SAVEPOINT w`); err != nil {
			_ = tx.Rollback()
			finish(err)
			return
		}
		if results[i] = call(req.fn, tx); results[i] != nil {
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO w`); err != nil {
				// The transaction itself is broken; nothing in it can commit.
				_ = tx.Rollback()
				finish(fmt.Errorf("sqlite: rolling back a failed write: %w", err))
				return
			}
		}
		if _, err := tx.ExecContext(ctx, `RELEASE w`); err != nil {
			_ = tx.Rollback()
			finish(err)
			return
		}
	}
	commit(tx)
}

func rerunnable(batch []*writeReq) bool {
	for _, req := range batch {
		if !req.rerun {
			return false
		}
	}
	return true
}

// runOptimistic runs the batch with no savepoints and reports whether every
// function succeeded; if not, the caller rolls back and runs it carefully.
func (db *DB) runOptimistic(tx *sql.Tx, batch []*writeReq, results []error) bool {
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			results[i] = err // not run, so nothing to undo
			continue
		}
		if call(req.fn, tx) != nil {
			return false
		}
	}
	return true
}

// call runs fn, turning a panic into that caller's error so that one bad
// write cannot take down the writer every other caller depends on.
func call(fn func(tx *sql.Tx) error, tx *sql.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite: write panicked: %v", p)
		}
	}()
	return fn(tx)
}
