package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestBatchIsolatesFailures runs three writes in one group commit; the
// middle one fails (and one panics) and only those are rolled back.
func TestBatchIsolatesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "b.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	insert := func(title string) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := memoCreateTx(ctx, tx, store.NewID("mem"), &store.MemoCreateParams{Title: title, Body: "b"})
			return err
		}
	}
	boom := errors.New("boom")
	reqs := []*writeReq{
		{ctx: ctx, fn: insert("first"), done: make(chan error, 1)},
		{ctx: ctx, fn: func(tx *sql.Tx) error {
			if err := insert("doomed")(tx); err != nil {
				return err
			}
			return boom
		}, done: make(chan error, 1)},
		{ctx: ctx, fn: func(tx *sql.Tx) error { panic("bad write") }, done: make(chan error, 1)},
		{ctx: ctx, fn: insert("last"), done: make(chan error, 1)},
	}
	db.runBatch(reqs)
	require.NoError(t, <-reqs[0].done)
	require.ErrorIs(t, <-reqs[1].done, boom)
	require.ErrorContains(t, <-reqs[2].done, "panicked")
	require.NoError(t, <-reqs[3].done)
	for title, want := range map[string]error{"first": nil, "last": nil, "doomed": store.ErrNotFound} {
		_, err := db.MemoGetByTitle(ctx, title)
		if want == nil {
			require.NoError(t, err, title)
		} else {
			require.ErrorIs(t, err, want, title)
		}
	}
}

// TestOptimisticBatchFallsBack: a batch of re-runnable writes runs without
// savepoints; when one fails, the batch is rolled back and re-run with
// savepoints, so the others still commit once and the failure leaves nothing.
func TestOptimisticBatchFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "b.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	runs := map[string]int{}
	insert := func(title string, fail error) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			runs[title]++
			if _, err := memoCreateTx(ctx, tx, store.NewID("mem"), &store.MemoCreateParams{Title: title, Body: "b"}); err != nil {
				return err
			}
			return fail
		}
	}
	boom := errors.New("boom")
	mk := func(fn func(tx *sql.Tx) error) *writeReq {
		return &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1), rerun: true}
	}
	ok := []*writeReq{mk(insert("a", nil)), mk(insert("b", nil))}
	db.runBatch(ok)
	require.NoError(t, <-ok[0].done)
	require.NoError(t, <-ok[1].done)
	require.Equal(t, map[string]int{"a": 1, "b": 1}, runs, "no failure, no re-run")

	mixed := []*writeReq{mk(insert("c", nil)), mk(insert("doomed", boom)), mk(insert("d", nil))}
	db.runBatch(mixed)
	require.NoError(t, <-mixed[0].done)
	require.ErrorIs(t, <-mixed[1].done, boom)
	require.NoError(t, <-mixed[2].done)
	require.Equal(t, 2, runs["c"], "re-run after the rollback")
	for title, want := range map[string]int{"a": 1, "c": 1, "d": 1, "doomed": 0} {
		ms, err := db.MemoSearch(ctx, &store.MemoSearchParams{Query: title})
		require.NoError(t, err)
		n := 0
		for _, m := range ms {
			if m.Title == title {
				n++
			}
		}
		require.Equal(t, want, n, title)
	}
}

// TestWriterCheckpointsRarely: at SQLite's default a commit that takes the
// WAL past 1,000 pages copies them back into the database and syncs it
// before its caller is answered; a run writes ~30 pages, so every ~30th
// run's commit stalled on it, which was the idle engine's p99 enqueue →
// start. The writer connection checkpoints at walPages, set on every
// (re)connect.
func TestWriterCheckpointsRarely(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "c.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	var pages int
	require.NoError(t, db.w.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&pages))
	require.Equal(t, walPages, pages)
}

// TestStartedWriteIgnoresLaterCancel: once the writer has started a write
// function, its caller giving up does not cut it short. A function whose
// statements could be interrupted halfway would roll back work the caller
// may already have been told about (a delivery acknowledged, a claim taken).
func TestStartedWriteIgnoresLaterCancel(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "c.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	for name, submit := range map[string]func(context.Context, func(context.Context, *sql.Tx) error) error{
		"tx": db.tx, "write": db.write,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			title := "started " + name
			require.NoError(t, submit(ctx, func(ctx context.Context, tx *sql.Tx) error {
				cancel()
				_, err := memoCreateTx(ctx, tx, store.NewID("mem"), &store.MemoCreateParams{Title: title, Body: "b"})
				return err
			}))
			_, err := db.MemoGetByTitle(context.Background(), title)
			require.NoError(t, err, "the write committed")

			// A caller that gave up before its turn is told so, and nothing runs.
			ran := false
			require.ErrorIs(t, submit(ctx, func(context.Context, *sql.Tx) error { ran = true; return nil }), context.Canceled)
			require.False(t, ran)
		})
	}
}
