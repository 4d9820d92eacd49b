package sessions_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
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
	"github.com/holdfast-bot/holdfast/store/storetest"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// process is one Holdfast process on a shared database: its own store
// handle, engine and sessions runtime, as a replica would have.
type process struct {
	db  store.Store
	eng *engine.Engine
	svc *sessions.Service
}

// tune adjusts a process's engine and sessions configuration.
type tune func(*engine.Config, *sessions.Config)

func startProcess(t *testing.T, data *testdb.DB, runner string, llm *fakellm.Server, start bool, tunes ...tune) *process {
	t.Helper()
	ctx := context.Background()
	db := data.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	models := model.NewRegistry("openai:slow", model.Config{OpenAIBaseURL: llm.URL, HTTPClient: llm.Client()})
	ecfg := engine.Config{Workers: 2, RunnerID: runner, DisableScheduler: true, PassInterval: time.Hour,
		CancelPoll: 20 * time.Millisecond}
	scfg := sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "openai:slow",
		TurnHeartbeat: 20 * time.Millisecond}
	for _, fn := range tunes {
		fn(&ecfg, &scfg)
	}
	eng := engine.New(ecfg, db, models, log)
	svc := sessions.New(db, scfg, eng, log)
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
		storetest.Until(t, a.db, func() bool { // a settles the run with its run_finished line
			r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
			return err == nil && r.Status == store.RunCancelled
		}, 10*time.Second, "the run on the other process settles cancelled")
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

// needsNotify skips a test of wake-ups between replicas on a store whose
// handles do not notify each other: SQLite is one process (SPEC §9).
func needsNotify(t *testing.T, data *testdb.DB) {
	t.Helper()
	if data.Kind() != testdb.Postgres {
		t.Skipf("wake-ups across replicas are PostgreSQL's LISTEN/NOTIFY; run with %s=postgres", testdb.EnvStore)
	}
}

// replicaBound is SPEC §9's "within milliseconds" made a number (issue
// 14: a decision on one replica resumes a run on another within 100 ms).
const replicaBound = 100 * time.Millisecond

// replicaRounds is how many times each cross-replica wake-up is measured;
// the median is held to replicaBound, each round to a second (the tick
// and the polls these tests configure are an hour or a minute away, so a
// missed notification cannot pass). The tests that measure do not run in
// parallel with the rest of their package: on two shared cores under the
// race detector, siblings' CPU would be what they measure.
const replicaRounds = 9

func checkBound(t *testing.T, what string, lat []time.Duration) {
	t.Helper()
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	t.Logf("%s: median %v, max %v (%v)", what, sorted[len(sorted)/2], sorted[len(sorted)-1], lat)
	require.Less(t, sorted[len(sorted)/2], replicaBound, "%s: median over %d rounds", what, len(lat))
	require.Less(t, sorted[len(sorted)-1], time.Second, "%s: slowest round", what)
}

// TestDecisionResumesOnAnotherReplica: a run suspended for review on
// replica B resumes on B as soon as a steward decides on replica A. B's
// safety-net tick is an hour away, so only the notification A's decision
// commits can wake it.
func TestDecisionResumesOnAnotherReplica(t *testing.T) {
	ctx := context.Background()
	data := testdb.New(t)
	needsNotify(t, data)
	llm := fakellm.New(false)
	t.Cleanup(llm.Close)
	a := startProcess(t, data, "a", llm, false) // decides; runs nothing
	b := startProcess(t, data, "b", llm, true)
	require.NoError(t, library.New(a.db, slog.New(slog.NewTextHandler(io.Discard, nil))).SeedExamples(ctx))
	type seen struct {
		engine.Event
		at time.Time
	}
	evs := make(chan seen, 256)
	b.eng.Subscribe(func(ev engine.Event) { evs <- seen{ev, time.Now()} })
	next := func(kind, itemID string) seen {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-evs:
				if (kind == "" || ev.Kind == kind) && ev.ItemID == itemID {
					return ev
				}
			case <-deadline:
				t.Fatalf("replica b never sent %s for %s", kind, itemID)
			}
		}
	}
	ada := engine.Decider{UserID: "ada", Username: "ada", Role: store.RoleSteward, Via: "api"}
	var lat []time.Duration
	for i := range replicaRounds {
		it, _, err := a.eng.Enqueue(ctx, engine.EnqueueParams{Command: "/draft-memo", DedupeKey: fmt.Sprint("decide-", i),
			Payload: map[string]any{"title": "Otters", "brief": "count them"}})
		require.NoError(t, err)
		held := next(engine.EventHoldOpened, it.ID)
		_, err = a.eng.Decide(ctx, engine.DecideParams{HoldID: held.HoldID, Decision: "approve", Decider: ada})
		require.NoError(t, err)
		t0 := time.Now()           // the decision is made (committed): from here on it is b's wake-up
		resumed := next("", it.ID) // b's first word of the run since it suspended
		lat = append(lat, resumed.at.Sub(t0))
		done := next(engine.EventRunFinished, it.ID)
		require.Equal(t, store.RunSucceeded, done.Status)
		r, err := a.db.RunGetByID(ctx, done.RunID)
		require.NoError(t, err)
		require.Equal(t, "b", r.RunnerID, "the run resumed on the replica that suspended it")
	}
	checkBound(t, "decision on a → run resumed on b", lat)
}

// TestTerminateReachesAnotherReplica: /terminate on replica A cancels the
// model call of a workflow run and of a chat turn running on replica B at
// once. B's cancel poll and turn heartbeat are far away, so only the
// notification the cancel request commits can reach it in time.
func TestTerminateReachesAnotherReplica(t *testing.T) {
	ctx := context.Background()
	data := testdb.New(t)
	needsNotify(t, data)
	llm := fakellm.New(true)
	t.Cleanup(llm.Close)
	slow := func(ec *engine.Config, sc *sessions.Config) {
		ec.CancelPoll = time.Hour
		sc.TurnHeartbeat = time.Minute
	}
	a := startProcess(t, data, "a", llm, false, slow)
	b := startProcess(t, data, "b", llm, true, slow)
	lib := library.New(a.db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, lib.SeedExamples(ctx))
	doc := strings.Replace(draftMemo(t), "- **Model** `template`", "- **Model** `openai:slow`", 1)
	doc = strings.Replace(doc, "`/draft-memo`", "`/slow-memo`", 1)
	_, _, err := lib.ImportWorkflow(ctx, "Slow memo", doc)
	require.NoError(t, err)
	ada := engine.Decider{UserID: "ada", Username: "ada", Role: store.RoleSteward, Via: "api"}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}

	t.Run("WorkflowRun", func(t *testing.T) {
		var lat []time.Duration
		for i := range replicaRounds {
			ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "ada"}})
			require.NoError(t, err)
			it, _, err := a.eng.Enqueue(ctx, engine.EnqueueParams{Command: "/slow-memo", DedupeKey: fmt.Sprint("run-", i),
				SessionID: ses.ID, Payload: map[string]any{"brief": "x"}})
			require.NoError(t, err)
			wait(llm.Arrived(), "the model was never called")
			t0 := time.Now()
			cmd, err := a.svc.Command(ctx, ses.ID, sessions.CmdTerminate, ada)
			require.NoError(t, err)
			require.Equal(t, 1, cmd.CancelledRuns)
			wait(llm.Gone(), "the model call on b was never cancelled")
			lat = append(lat, time.Since(t0))
			require.Eventually(t, func() bool {
				r, err := a.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
				return err == nil && r.Status == store.RunCancelled && r.RunnerID == "b"
			}, 10*time.Second, 5*time.Millisecond, "the run on b settles cancelled")
		}
		checkBound(t, "terminate on a → workflow model call cancelled on b", lat)
	})

	t.Run("ChatTurn", func(t *testing.T) {
		var lat, cmdLat []time.Duration
		for range replicaRounds {
			ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "ada"}})
			require.NoError(t, err)
			res, err := b.svc.Message(ctx, ses.ID, "write me an epic", ada, true)
			require.NoError(t, err)
			wait(llm.Arrived(), "the model was never called")
			t0 := time.Now()
			cmd, err := a.svc.Command(ctx, ses.ID, sessions.CmdTerminate, ada)
			require.NoError(t, err)
			cmdLat = append(cmdLat, time.Since(t0))
			require.True(t, cmd.CancelledTurn, "the terminate answers once b's turn has settled")
			wait(llm.Gone(), "the model call on b was never cancelled")
			lat = append(lat, time.Since(t0))
			got, err := a.svc.GetByID(ctx, ses.ID)
			require.NoError(t, err)
			require.NotEqual(t, res.TurnID, got.ActiveRunID)
			require.Equal(t, store.SessionCancelled, got.Status)
		}
		checkBound(t, "terminate on a → chat model call cancelled on b", lat)
		checkBound(t, "terminate on a answered", cmdLat)
	})
}
