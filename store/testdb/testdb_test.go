package testdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// TestHandlesShareOneDatabase: the cross-replica tests rely on every Open
// of one DB reaching the same data, and on each New being empty.
func TestHandlesShareOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t)
	a, b := d.Open(t), d.Open(t)
	m, err := a.MemoCreate(ctx, &store.MemoCreateParams{Title: "Shared", Body: "seen by both handles"})
	require.NoError(t, err)
	got, err := b.MemoGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, m.Body, got.Body)

	d.Exec(t, `UPDATE memos SET notes = 'set directly'`)
	got, err = b.MemoGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, "set directly", got.Notes)

	_, err = testdb.Open(t).MemoGetByID(ctx, m.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "a new database is empty")
}

func TestSelected(t *testing.T) {
	t.Setenv(testdb.EnvStore, "postgres")
	require.Equal(t, testdb.Postgres, testdb.Selected())
	t.Setenv(testdb.EnvStore, "")
	require.Equal(t, testdb.SQLite, testdb.Selected())
}
