package sessions_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// process is one Holdfast process on a shared database: its own store
// handle, engine and sessions runtime, as a replica would have.
type process struct {
	db  store.Store
	eng *engine.Engine
	svc *sessions.Service
}

func startProcess(t *testing.T, data *testdb.DB, runner string, llm *fakellm.Server, start bool) *process {
	t.Helper()
	ctx := context.Background()
	db := data.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	models := model.NewRegistry("openai:slow", model.Config{OpenAIBaseURL: llm.URL, HTTPClient: llm.Client()})
	eng := engine.New(engine.Config{Workers: 2, RunnerID: runner, DisableScheduler: true, PassInterval: time.Hour,
		CancelPoll: 20 * time.Millisecond}, db, models, log)
	svc := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "openai:slow",
		TurnHeartbeat: 20 * time.Millisecond}, eng, log)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if start {
		go func() { defer close(done); _ = eng.Start(runCtx) }()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		svc.Close()
	})
	return &process{db: db, eng: eng, svc: svc}
}

// TestCancelAcrossProcesses: a chat turn and a workflow run started by one
// process are cancelled by /terminate sent to another on the same
// database; the request is durable and reaches the running model call.
func TestCancelAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	llm := fakellm.New(true)
	t.Cleanup(llm.Close)
	data := testdb.New(t)
	a := startProcess(t, data, "a", llm, true)
	b := startProcess(t, data, "b", llm, false)
	require.NoError(t, library.New(a.db, slog.New(slog.NewTextHandler(io.Discard, nil))).SeedExamples(ctx))
	ada := engine.Decider{UserID: "ada", Username: "ada", Role: store.RoleSteward, Via: "api"}
	arrived := func() {
		t.Helper()
		select {
		case <-llm.Arrived():
		case <-time.After(10 * time.Second):
			t.Fatal("the model was never called")
		}
	}

	t.Run("ChatTurn", func(t *testing.T) {
		ses, err := a.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "ada"}})
		require.NoError(t, err)
		res, err := a.svc.Message(ctx, ses.ID, "write me an epic", ada, true)
		require.NoError(t, err)
		arrived()

		_, err = b.svc.Message(ctx, ses.ID, "are you there?", ada, true)
		require.ErrorIs(t, err, store.ErrConflict, "the other process sees the turn alive and refuses a second one")
		cmd, err := b.svc.Command(ctx, ses.ID, sessions.CmdTerminate, ada)
		require.NoError(t, err)
		require.True(t, cmd.CancelledTurn, "the turn running on the other process is cancelled")
		got, err := b.svc.GetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.NotEqual(t, res.TurnID, got.ActiveRunID)
		require.Equal(t, store.SessionCancelled, got.Status)
		require.Contains(t, got.DoneReason, "terminated by user:ada")
	})

	t.Run("WorkflowRun", func(t *testing.T) {
		doc := strings.Replace(draftMemo(t), "- **Model** `template`", "- **Model** `openai:slow`", 1)
		doc = strings.Replace(doc, "`/draft-memo`", "`/slow-memo`", 1)
		_, _, err := library.New(a.db, slog.New(slog.NewTextHandler(io.Discard, nil))).ImportWorkflow(ctx, "Slow memo", doc)
		require.NoError(t, err)
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "ada"}})
		require.NoError(t, err)
		it, _, err := a.eng.Enqueue(ctx, engine.EnqueueParams{Command: "/slow-memo", DedupeKey: "k", SessionID: ses.ID,
			Payload: map[string]any{"brief": "x"}})
		require.NoError(t, err)
		arrived() // running on a

		cmd, err := b.svc.Command(ctx, ses.ID, sessions.CmdTerminate, ada)
		require.NoError(t, err)
		require.Equal(t, 1, cmd.CancelledRuns)
		require.Eventually(t, func() bool {
			r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
			return err == nil && r.Status == store.RunCancelled
		}, 10*time.Second, 5*time.Millisecond, "the run on the other process settles cancelled")
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, "a", r.RunnerID)
		require.Contains(t, r.Error, "ada")
	})
}

func draftMemo(t *testing.T) string {
	t.Helper()
	b, err := workflow.Examples.ReadFile("examples/draft-memo.md")
	require.NoError(t, err)
	return string(b)
}
