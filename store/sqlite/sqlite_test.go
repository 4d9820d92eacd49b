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

	// A new database gets the store's page size; one made before keeps its
	// own, since only a VACUUM could change it.
	t.Run("PageSize", func(t *testing.T) {
		pageSize := func(path string) (size int, mode string) {
			raw, err := sql.Open("sqlite3", path)
			require.NoError(t, err)
			defer raw.Close()
			require.NoError(t, raw.QueryRow(`PRAGMA page_size`).Scan(&size))
			require.NoError(t, raw.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
			return size, mode
		}
		size, mode := pageSize(path)
		require.Equal(t, 2048, size, "a database Open created")
		require.Equal(t, "wal", mode)

		old := filepath.Join(t.TempDir(), "old.db")
		raw, err := sql.Open("sqlite3", "file:"+old+"?_journal_mode=WAL")
		require.NoError(t, err)
		_, err = raw.Exec(`CREATE TABLE made_before (x)`)
		require.NoError(t, err)
		require.NoError(t, raw.Close())
		db, err := sqlite.Open(ctx, sqlite.Config{Path: old})
		require.NoError(t, err)
		require.NoError(t, db.Close())
		size, mode = pageSize(old)
		require.Equal(t, 4096, size, "a database made at SQLite's default")
		require.Equal(t, "wal", mode)
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

	// Each migration that fills in data is checked on a database made
	// before it: undo takes the schema back to just before that migration.
	// Undone newest first: the later migrations too, as they are applied again.
	const undoHeads = `ALTER TABLE api_keys DROP COLUMN revoked_at; ALTER TABLE slack_outbox DROP COLUMN response_url; DROP INDEX slack_inbox_heads; ALTER TABLE slack_inbox DROP COLUMN head;
		DROP INDEX slack_outbox_heads; ALTER TABLE slack_outbox DROP COLUMN head; `
	for name, tc := range map[string]struct {
		check storetest.UpgradeCheck
		undo  string
	}{
		"SlackEventLinesBackfilled": {storetest.SlackEventLinesBackfilled,
			undoHeads + `DROP TABLE slack_event_lines; DELETE FROM schema_migrations WHERE version >= 31`},
		"SlackHeadsBackfilled": {storetest.SlackHeadsBackfilled, undoHeads + `DELETE FROM schema_migrations WHERE version >= 32`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "upgrade.db")
			tc.check(t, func(t *testing.T) store.Store {
				db, err := sqlite.Open(ctx, sqlite.Config{Path: path})
				require.NoError(t, err)
				return db
			}, func(t *testing.T, _ store.Store) {
				raw, err := sql.Open("sqlite3", path)
				require.NoError(t, err)
				defer raw.Close()
				_, err = raw.Exec(tc.undo)
				require.NoError(t, err)
			})
		})
	}

	t.Run("BadSyncRefused", func(t *testing.T) {
		_, err := sqlite.Open(ctx, sqlite.Config{Path: path, Sync: "off"})
		require.Error(t, err)
	})
}
