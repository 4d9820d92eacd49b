package sessions_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

// withEngine is the runtime wired to the real engine over one SQLite file,
// with the example workflows seeded (/draft-memo holds for review). The
// engine is not started: tests drive it one pass at a time.
func withEngine(t *testing.T) (*sessions.Service, *engine.Engine, *sqlite.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "h.db")})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, library.New(db, log).SeedExamples(ctx))
	models := model.NewRegistry("template", model.Config{})
	eng := engine.New(engine.Config{Workers: 1, DisableScheduler: true}, db, models, log)
	svc := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "template"}, sessions.EngineOf(eng), log)
	t.Cleanup(func() {
		svc.Close()
		require.NoError(t, db.Close())
	})
	return svc, eng, db
}

func TestWithRealEngine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("EnqueueHoldOpenHoldsAndTerminate", func(t *testing.T) {
		t.Parallel()
		svc, eng, _ := withEngine(t)
		ses, err := svc.Create(ctx, sessions.CreateParams{Title: "memo", Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		res, err := svc.Message(ctx, ses.ID, "/draft-memo otters in winter", "user:u", false)
		require.NoError(t, err)
		require.Contains(t, res.Reply.Payload["text"], "Queued /draft-memo")

		pass, err := eng.RunPass(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, pass.Started)

		got, err := svc.GetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, got.OpenHolds, "the run from this session waits at its hold")
		page, err := svc.List(ctx, sessions.ListParams{})
		require.NoError(t, err)
		require.Len(t, page.Sessions, 1)
		require.EqualValues(t, 1, page.Sessions[0].OpenHolds)
		evs, err := svc.Events(ctx, ses.ID, timeZero, 0)
		require.NoError(t, err)
		require.Contains(t, types(evs), "run_started", "one session spans chat → enqueue → run")
		require.Contains(t, types(evs), "hold_opened")

		cmd, err := svc.Command(ctx, ses.ID, "/terminate", "user:u")
		require.NoError(t, err)
		require.Equal(t, 1, cmd.CancelledRuns, "the suspended run is cancelled")
		require.Zero(t, cmd.Session.OpenHolds)
	})

	t.Run("YoloSessionIsNotHeld", func(t *testing.T) {
		t.Parallel()
		svc, eng, _ := withEngine(t)
		ses, err := svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		_, err = svc.SetPolicy(ctx, ses.ID, store.PolicyYolo, "user:u")
		require.NoError(t, err)
		_, err = svc.Message(ctx, ses.ID, "/draft-memo herons", "user:u", false)
		require.NoError(t, err)
		_, err = eng.RunPass(ctx)
		require.NoError(t, err)
		evs, err := svc.Events(ctx, ses.ID, timeZero, 0)
		require.NoError(t, err)
		require.NotContains(t, types(evs), "hold_opened", "yolo: nothing is held")
		require.Contains(t, types(evs), "memo_dispatched")
	})
}
