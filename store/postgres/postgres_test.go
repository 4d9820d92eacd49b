package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
			undoHeads + `DROP TABLE slack_event_lines; DELETE FROM schema_migrations WHERE version >= 10`},
		"SlackHeadsBackfilled": {storetest.SlackHeadsBackfilled, undoHeads + `DELETE FROM schema_migrations WHERE version >= 11`},
	} {
		t.Run(name, func(t *testing.T) {
			url := pgtest.SchemaURL(t)
			tc.check(t, func(t *testing.T) store.Store {
				db, err := postgres.Open(ctx, postgres.Config{URL: url})
				require.NoError(t, err)
				return db
			}, func(t *testing.T, s store.Store) {
				require.NoError(t, postgres.ExecForTest(ctx, s.(*postgres.DB), tc.undo))
			})
		})
	}

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

// TestListenerReconnectWakesCampaigners: notices sent while the listening
// connection is down are lost, so after reconnecting the store wakes its
// subscribers for everything that may have happened, a released lease
// included (or a follower would wait out the lease's expiry).
func TestListenerReconnectWakesCampaigners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTemp(t)
	reconnect := make(chan struct{})
	postgres.HoldListenerReconnectForTest(db, reconnect)
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := db.WorkSubscribe(subCtx)
	held, err := db.LeaseAcquire(ctx, "leader", "a", time.Now(), time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	n, err := postgres.TerminateListenerForTest(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	// Released while nobody listens: its own notice is lost.
	require.NoError(t, db.LeaseRelease(ctx, "leader", "a"))
	close(reconnect)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case w := <-work:
			if w.Kind == store.WorkLeaseFree {
				return
			}
		case <-deadline:
			t.Fatal("no lease_free wake-up after the listener reconnected")
		}
	}
}

// TestNameLocks: a memo write locks the names it answers to so that a
// workflow naming one of them cannot be indexed against a snapshot that
// misses it, but two writes answering to one name (a workflow's dispatches,
// all titled alike) have nothing to check against each other and must not
// queue behind each other's commits.
func TestNameLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTemp(t)
	title := "Daily " + store.NewID("t")
	written, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- postgres.HoldMemoCreateForTest(ctx, db, &store.MemoCreateParams{Title: title, Body: "held"}, written, release)
	}()
	<-written
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	t.Run("AMemoAnsweringToTheSameNameDoesNotWait", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := db.MemoCreate(ctx, &store.MemoCreateParams{Title: title, Body: "second"})
			done <- err
		}()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("a memo with the same title waited for the held write's commit")
		}
	})

	t.Run("AWorkflowNamingItWaitsAndSeesIt", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Wf " + title, Body: "wf", MemoType: store.MemoTypeWorkflow,
				Workflow: &store.WorkflowIndex{Command: "/daily" + strings.ToLower(store.NewID("c")), Status: "ok",
					Names: []store.WorkflowName{{Name: title, Exists: false}}}})
			done <- err
		}()
		// Another session's lock wait has no signal to wait on: poll.
		require.Eventually(t, func() bool {
			n, err := postgres.NameLockWaitersForTest(ctx, db, title)
			return err == nil && n > 0
		}, 10*time.Second, 5*time.Millisecond, "the workflow write never waited for the name lock")
		select {
		case err := <-done:
			t.Fatalf("the workflow write finished while the memo it names was in flight: %v", err)
		default:
		}
		close(release)
		released = true
		require.NoError(t, <-held)
		require.ErrorIs(t, <-done, store.ErrStaleCompile)
	})
}
