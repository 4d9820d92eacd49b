package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
	"github.com/holdfast-bot/holdfast/store/storetest"
)

func openTemp(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "holdfast.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")

	t.Run("ReopenIsIdempotent", func(t *testing.T) {
		db, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		require.NoError(t, err)
		require.NoError(t, db.Close())
		db, err = sqlite.Open(ctx, sqlite.Config{Path: path})
		require.NoError(t, err)
		require.NoError(t, db.Close())
	})

	t.Run("NewerSchemaRefused", func(t *testing.T) {
		raw, err := sql.Open("sqlite3", path)
		require.NoError(t, err)
		_, err = raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', '')`, sqlite.SchemaVersion()+1)
		require.NoError(t, err)
		require.NoError(t, raw.Close())
		_, err = sqlite.Open(ctx, sqlite.Config{Path: path})
		require.ErrorIs(t, err, sqlite.ErrSchemaTooNew)
	})

	t.Run("BadSyncRefused", func(t *testing.T) {
		_, err := sqlite.Open(ctx, sqlite.Config{Path: path, Sync: "off"})
		require.Error(t, err)
	})
}
