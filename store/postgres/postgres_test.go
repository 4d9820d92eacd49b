package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
	"github.com/holdfast-bot/holdfast/store/storetest"
)

func openTemp(t testing.TB) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.SchemaURL(t), MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	pgtest.BaseURL(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)

	t.Run("ReopenIsIdempotent", func(t *testing.T) {
		for range 2 {
			db, err := postgres.Open(ctx, postgres.Config{URL: url})
			require.NoError(t, err)
			require.NoError(t, db.Close())
		}
	})

	t.Run("NewerSchemaRefused", func(t *testing.T) {
		db, err := postgres.Open(ctx, postgres.Config{URL: url})
		require.NoError(t, err)
		require.NoError(t, postgres.ExecForTest(ctx, db, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'future', now())`,
			postgres.SchemaVersion()+1))
		require.NoError(t, db.Close())
		_, err = postgres.Open(ctx, postgres.Config{URL: url})
		require.ErrorIs(t, err, postgres.ErrSchemaTooNew)
	})

	t.Run("NotAURL", func(t *testing.T) {
		_, err := postgres.Open(ctx, postgres.Config{URL: "data/holdfast.db"})
		require.Error(t, err)
	})
}

func TestIsURL(t *testing.T) {
	t.Parallel()
	require.True(t, postgres.IsURL("postgres://u@h/db"))
	require.True(t, postgres.IsURL("postgresql://u@h/db"))
	require.False(t, postgres.IsURL("data/holdfast.db"))
	require.False(t, postgres.IsURL("file:postgres://x"))
	require.Equal(t, "HOLDFAST_TEST_POSTGRES", pgtest.EnvURL)
}
