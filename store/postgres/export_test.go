package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-bot/holdfast/store"
)

// ExecForTest runs one statement on db's pool.
func ExecForTest(ctx context.Context, db *DB, sql string, args ...any) error {
	_, err := db.pool.Exec(ctx, sql, args...)
	return err
}

// HoldMemoCreateForTest writes a memo as MemoCreate does, signals written
// once its statements (name locks included) have run, and commits only
// when release closes: the test sees what a concurrent write does while
// this one is in flight (once, should tx re-run it after a deadlock).
func HoldMemoCreateForTest(ctx context.Context, db *DB, p *store.MemoCreateParams, written chan<- struct{}, release <-chan struct{}) error {
	signal := sync.OnceFunc(func() { close(written) })
	return db.tx(ctx, func(ctx context.Context, tx *txn) error {
		if _, err := memoCreateTx(ctx, tx, store.NewID("mem"), p); err != nil {
			return err
		}
		signal()
		<-release
		return nil
	})
}

// NameLockWaitersForTest counts the transactions waiting for name's lock.
func NameLockWaitersForTest(ctx context.Context, db *DB, name string) (n int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND classid = $1 AND objid::bigint = (hashtext(lower($2)) & x'ffffffff'::bigint)`, nameLockSpace, name).Scan(&n)
	return n, err
}

// TerminateListenerForTest ends the backend LISTENing for db's work notices
// and waits (up to 5 s) until it has gone, answering how many it ended.
func TerminateListenerForTest(ctx context.Context, db *DB) (n int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND query = $1`, `LISTEN `+pgx.Identifier{db.workChannel}.Sanitize()).Scan(&n)
	return n, err
}

// HoldListenerReconnectForTest makes db's listener wait for release before
// reconnecting after a lost connection. Call it before the first
// subscription.
func HoldListenerReconnectForTest(db *DB, release <-chan struct{}) {
	db.listener.beforeReconnect = func() { <-release }
}
