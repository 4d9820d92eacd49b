package sessions_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// withEngine is the runtime wired to the real engine over one SQLite file,
// with the example workflows seeded (/draft-memo holds for review). The
// engine is not started: tests drive it one pass at a time.
func withEngine(t *testing.T) (*sessions.Service, *engine.Engine, store.Store) {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, library.New(db, log).SeedExamples(ctx))
	models := model.NewRegistry("template", model.Config{})
	eng := engine.New(engine.Config{Workers: 1, DisableScheduler: true, SlackStewards: []string{"USTEWARD"}}, db, models, log)
	svc := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "template"}, eng, log)
	t.Cleanup(func() {
		svc.Close()
	})
	return svc, eng, db
}

func TestWithRealEngine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A refused enqueue is said as the engine's reason, for people.
	t.Run("RefusedEnqueueSaysWhy", func(t *testing.T) {
		t.Parallel()
		svc, _, db := withEngine(t)
		wf, err := db.WorkflowGetByCommand(ctx, "/weekly-digest")
		require.NoError(t, err)
		_, err = db.WorkflowStatusSet(ctx, wf.MemoID, "paused")
		require.NoError(t, err)
		ses, err := svc.Create(ctx, sessions.CreateParams{Title: "digest", Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		res, err := svc.Message(ctx, ses.ID, "/weekly-digest now please", user("u"), false)
		require.NoError(t, err)
		require.Equal(t, "Could not queue /weekly-digest: workflow /weekly-digest is paused, not live, so it accepts no items", res.Reply.Payload["text"])
	})

	t.Run("EnqueueHoldOpenHoldsAndTerminate", func(t *testing.T) {
		t.Parallel()
		svc, eng, _ := withEngine(t)
		ses, err := svc.Create(ctx, sessions.CreateParams{Title: "memo", Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		res, err := svc.Message(ctx, ses.ID, "/draft-memo otters in winter", user("u"), false)
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

		cmd, err := svc.Command(ctx, ses.ID, "/terminate", user("u"))
		require.NoError(t, err)
		require.Equal(t, 1, cmd.CancelledRuns, "the suspended run is cancelled")
		require.Zero(t, cmd.Session.OpenHolds)
		require.Equal(t, store.SessionCancelled, cmd.Session.Status, "what terminate stopped shows on the session")
		require.Equal(t, "terminated by user:u", cmd.Session.DoneReason)
	})

	t.Run("YoloSessionIsNotHeld", func(t *testing.T) {
		t.Parallel()
		svc, eng, _ := withEngine(t)
		ses, err := svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		_, err = svc.SetPolicy(ctx, ses.ID, store.PolicyYolo, user("u"))
		require.NoError(t, err)
		_, err = svc.Message(ctx, ses.ID, "/draft-memo herons", user("u"), false)
		require.NoError(t, err)
		_, err = eng.RunPass(ctx)
		require.NoError(t, err)
		evs, err := svc.Events(ctx, ses.ID, timeZero, 0)
		require.NoError(t, err)
		require.NotContains(t, types(evs), "hold_opened", "yolo: nothing is held")
		require.Contains(t, types(evs), "memo_dispatched")
	})
}

// TestPostureLoosensOnlyForStewards: on every surface a change that holds
// less needs a steward (as the engine knows them: role, linked account or
// SLACK_STEWARDS); anyone may make a session stricter. A refusal records
// nothing.
func TestPostureLoosensOnlyForStewards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, _, db := withEngine(t)
	_, err := db.UserCreate(ctx, &store.User{Username: "lin", PasswordHash: "x", Role: store.RoleSteward, SlackUserID: "ULINKED"})
	require.NoError(t, err)
	var (
		slackUser    = engine.Decider{SlackUserID: "U1", Via: "slack"}
		slackSteward = engine.Decider{SlackUserID: "USTEWARD", Via: "slack"}
		slackLinked  = engine.Decider{SlackUserID: "ULINKED", Via: "slack"}
		viewer       = engine.Decider{UserID: "v", Role: store.RoleViewer, Via: "console"}
	)
	for _, tc := range []struct {
		name     string
		from, to string
		by       engine.Decider
		allowed  bool
	}{
		{"SlackUserAutoToYolo", "auto", "yolo", slackUser, false},
		{"SlackUserManualToAuto", "manual", "auto", slackUser, false},
		{"SlackUserManualToYolo", "manual", "yolo", slackUser, false},
		{"ViewerAutoToYolo", "auto", "yolo", viewer, false},
		{"SlackUserStricter", "yolo", "manual", slackUser, true},
		{"SlackUserSame", "auto", "auto", slackUser, true},
		{"SlackStewardLooser", "manual", "yolo", slackSteward, true},
		{"LinkedConsoleStewardLooser", "auto", "yolo", slackLinked, true},
		{"ConsoleStewardLooser", "manual", "yolo", user("u"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ses, err := svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
			require.NoError(t, err)
			_, err = svc.SetPolicy(ctx, ses.ID, tc.from, user("u"))
			require.NoError(t, err)
			before, err := svc.Events(ctx, ses.ID, timeZero, 0)
			require.NoError(t, err)

			got, err := svc.SetPolicy(ctx, ses.ID, tc.to, tc.by)
			if tc.allowed {
				require.NoError(t, err)
				require.Equal(t, tc.to, got.Policy)
				evs, err := svc.Events(ctx, ses.ID, timeZero, 0)
				require.NoError(t, err)
				changed := 0
				if tc.from != tc.to {
					changed = 1
				}
				require.Len(t, evs, len(before)+changed, "a change is recorded once; setting the posture it has records nothing")
				return
			}
			require.ErrorIs(t, err, store.ErrForbidden)
			require.Contains(t, store.ReasonOf(err), "only a steward")
			after, err := svc.GetByID(ctx, ses.ID)
			require.NoError(t, err)
			require.Equal(t, tc.from, after.Policy)
			evs, err := svc.Events(ctx, ses.ID, timeZero, 0)
			require.NoError(t, err)
			require.Len(t, evs, len(before), "a refusal records nothing")
		})
	}
}
