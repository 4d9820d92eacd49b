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
