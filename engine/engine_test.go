package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// clock is a movable test clock.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type testBundle struct {
	data   *testdb.DB
	db     store.Store
	lib    *library.Service
	eng    *Engine
	clock  *clock
	events chan Event
	llm    *fakellm.Server
}

type setupOpts struct {
	cfg       Config
	scheduler bool
	noStart   bool
	blockLLM  bool
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	ctx := context.Background()
	data := testdb.New(t)
	db := data.Open(t)
	b := &testBundle{db: db, data: data, lib: library.New(db, nil), clock: &clock{}, events: make(chan Event, 4096)}
	b.llm = fakellm.New(o.blockLLM)
	t.Cleanup(b.llm.Close)
	cfg := o.cfg
	cfg.Now = b.clock.Now
	cfg.DisableScheduler = !o.scheduler
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	cfg.RetryBase = time.Millisecond
	if cfg.PassInterval == 0 {
		// No safety-net tick within a test: runs start only because an
		// enqueue, a decision or a recovery woke the runner.
		cfg.PassInterval = time.Hour
	}
	models := model.NewRegistry("template", model.Config{OpenAIBaseURL: b.llm.URL, HTTPClient: b.llm.Client(), Tracer: cfg.Tracer})
	b.eng = New(cfg, db, models, nil)
	b.eng.Subscribe(func(ev Event) { b.events <- ev })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if !o.noStart {
		go func() {
			defer close(done)
			_ = b.eng.Start(runCtx)
		}()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		b.llm.Unblock()
	})
	return b
}

// wfDoc builds a workflow memo; ¦ stands for a backtick.
func wfDoc(command string, policy ...string) string {
	doc := `# Workflow ` + command + `

## Trigger
- **Command** ¦` + command + `¦
- **Status** ¦live¦
- **Summary** test workflow

## Load Contract
- **Trigger** payload.sourceMemo

## Steps
1. **Context** Load.
2. **Process** Draft.
   ¦¦¦prompt
   # {{.Payload.title}}

   {{.Payload.brief}}
   ¦¦¦
3. **Guard** Not empty.
   ¦¦¦guard
   min_chars: 1
   not_contains: FORBIDDEN
   ¦¦¦
4. **Output** Dispatch.

## Policy
` + "- **Timeout** ¦30s¦\n"
	for _, p := range policy {
		doc += "- " + p + "\n"
	}
	return strings.ReplaceAll(doc, "¦", "`")
}

func (b *testBundle) workflow(t *testing.T, command string, policy ...string) {
	t.Helper()
	m, _, err := b.lib.ImportWorkflow(context.Background(), "", wfDoc(command, policy...))
	require.NoError(t, err)
	w, err := b.db.WorkflowGetByMemoID(context.Background(), m.ID)
	require.NoError(t, err)
	require.Empty(t, w.Errors)
	require.Equal(t, "live", w.Status)
}

func (b *testBundle) enqueue(t *testing.T, p EnqueueParams) *store.QueueItem {
	t.Helper()
	if p.DedupeKey == "" {
		p.DedupeKey = store.NewID("k")
	}
	it, created, err := b.eng.Enqueue(context.Background(), p)
	require.NoError(t, err)
	require.True(t, created)
	return it
}

// waitRun waits for an event of kind on the item's run and returns the run.
func (b *testBundle) waitRun(t *testing.T, itemID, kind string) *store.Run {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-b.events:
			if ev.ItemID == itemID && ev.Kind == kind {
				r, err := b.db.RunGetByID(context.Background(), ev.RunID)
				require.NoError(t, err)
				return r
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s of item %s", kind, itemID)
		}
	}
}

func (b *testBundle) holdOf(t *testing.T, r *store.Run) *store.Hold {
	t.Helper()
	require.NotEmpty(t, r.HoldID)
	h, err := b.db.HoldGetByID(context.Background(), r.HoldID)
	require.NoError(t, err)
	return h
}

func (b *testBundle) user(t *testing.T, name, role, slack string) *store.User {
	t.Helper()
	u, err := b.db.UserCreate(context.Background(), &store.User{Username: name, PasswordHash: "x", Role: role, SlackUserID: slack})
	require.NoError(t, err)
	return u
}

func steward(u *store.User) Decider {
	return Decider{UserID: u.ID, Username: u.Username, Role: u.Role}
}

func TestRunDispatchesMemo(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	b.workflow(t, "/draft")
	it := b.enqueue(t, EnqueueParams{Command: "draft", OwnerUID: "user:u1",
		Payload: map[string]any{"title": "Otters", "brief": "Otters hold hands.", "tags": []any{"a", "b"}, "targetNotes": "n"}})
	require.Equal(t, "/draft", it.Command)
	require.NotEmpty(t, it.SessionID, "a sessionless item gets an engine-minted session")

	r := b.waitRun(t, it.ID, EventRunFinished)
	require.Equal(t, store.RunSucceeded, r.Status, r.Error)
	require.Equal(t, store.RunIDForItem(it.ID), r.ID)
	require.Len(t, r.Steps, 4)
	for _, s := range r.Steps {
		require.Equal(t, StepSucceeded, s.Status)
		require.NotNil(t, s.StartedAt)
	}
	require.Equal(t, 5, r.Steps[1].TokensOut, "template tokens are word counts")
	require.Contains(t, string(r.Manifest), `"command":"/draft"`, "the manifest is stored on the run")
	require.Contains(t, string(r.Guards), "min_chars")

	m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
	require.NoError(t, err)
	require.Equal(t, "Otters", m.Title, "title is the output's first # heading")
	require.True(t, m.Unlisted)
	require.Equal(t, []string{"a", "b"}, m.Tags)
	require.Equal(t, "n", m.Notes)
	require.Contains(t, m.Body, "Otters hold hands.")

	item, err := b.db.QueueItemGetByID(ctx, it.ID)
	require.NoError(t, err)
	require.Equal(t, store.ItemDone, item.Status)
	require.Equal(t, r.ID, item.RunID)

	ses, err := b.db.SessionGetByID(ctx, it.SessionID)
	require.NoError(t, err)
	require.Equal(t, store.OriginWorkflow, ses.Origin)
	require.Equal(t, []string{"workflow:" + it.ID}, ses.Tags)
	types := b.eventTypes(t, it.SessionID)
	require.Equal(t, []string{"run_started", "run_step", "run_step", "run_step", "run_step", "memo_dispatched", "run_finished"}, types)
}

func (b *testBundle) eventTypes(t *testing.T, sessionID string) []string {
	t.Helper()
	ses, err := b.db.SessionGetByID(context.Background(), sessionID)
	require.NoError(t, err)
	evs, err := b.db.EventList(context.Background(), &store.EventListParams{SessionID: sessionID})
	require.NoError(t, err)
	require.Equal(t, int(ses.EventCount), len(evs))
	types := make([]string, len(evs))
	for i, ev := range evs {
		types[i] = ev.Type
	}
	return types
}

func TestEnqueueIdempotentUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	b.workflow(t, "/draft")
	var (
		wg      sync.WaitGroup
		created atomic.Int32
		ids     sync.Map
		errs    = make([]error, 8)
	)
	for i := range errs {
		wg.Go(func() {
			it, ok, err := b.eng.Enqueue(context.Background(), EnqueueParams{Command: "/draft", DedupeKey: "same"})
			if errs[i] = err; err != nil {
				return
			}
			if ok {
				created.Add(1)
			}
			ids.Store(it.ID, true)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, int32(1), created.Load())
	n := 0
	ids.Range(func(_, _ any) bool { n++; return true })
	require.Equal(t, 1, n, "every enqueuer got the same item")
	pending, err := b.db.QueueItemCountPending(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), pending)
}

func TestEnqueueRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	ctx := context.Background()
	b.workflow(t, "/draft")
	w, err := b.db.WorkflowGetByCommand(ctx, "/draft")
	require.NoError(t, err)
	_, err = b.db.WorkflowStatusSet(ctx, w.MemoID, "paused")
	require.NoError(t, err)
	broken := wfDoc("/broken", "**Destination** ¦worktree¦")
	brokenMemo, _, err := b.lib.ImportWorkflow(ctx, "", broken)
	require.NoError(t, err)
	brokenLine := 1 + strings.Count(broken[:strings.Index(broken, "worktree")], "\n")

	for _, tc := range []struct {
		name, command string
		is            error
		contains      string
		notCompiled   *NotCompiledError
	}{
		{"Unknown", "/nope", store.ErrNotFound, "no workflow has the command /nope", nil},
		{"Paused", "/draft", store.ErrConflict, "not live", nil},
		{"DoesNotCompile", "broken", store.ErrConflict, "does not compile", &NotCompiledError{Command: "/broken", MemoID: brokenMemo.ID,
			First: store.CompileError{Line: brokenLine, Message: "destination worktree is not supported; use memo or reply"}, Count: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := b.eng.Enqueue(ctx, EnqueueParams{Command: tc.command, DedupeKey: "k"})
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.contains)
			var nc *NotCompiledError
			require.Equal(t, tc.notCompiled != nil, errors.As(err, &nc), "a *NotCompiledError exactly when the memo does not compile")
			if tc.notCompiled != nil {
				require.Equal(t, tc.notCompiled, nc)
			}
		})
	}
	pending, err := b.db.QueueItemCountPending(ctx)
	require.NoError(t, err)
	require.Zero(t, pending, "a refused enqueue queues nothing")
}

func TestConcurrentRunnersNeverClaimTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	b.workflow(t, "/draft")
	const n = 120
	for i := range n {
		b.enqueue(t, EnqueueParams{Command: "/draft", DedupeKey: fmt.Sprint(i), Payload: map[string]any{"brief": "x"}})
	}
	// Four engines on one store, as four replicas would be.
	var engines []*Engine
	for i := range 4 {
		engines = append(engines, New(Config{Workers: 2, RunnerID: fmt.Sprint("r", i), DisableScheduler: true},
			b.db, model.NewRegistry("template", model.Config{}), nil))
	}
	var (
		mu       sync.Mutex
		seen     = map[string]int{}
		wg       sync.WaitGroup
		claimErr error
	)
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				runs, err := e.claim(context.Background(), 3)
				if err != nil {
					mu.Lock()
					claimErr = errors.Join(claimErr, err)
					mu.Unlock()
					return
				}
				if len(runs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range runs {
					seen[r.ItemID]++
				}
				mu.Unlock()
				for _, r := range runs {
					e.execute(context.Background(), r)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, claimErr)
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, "item %s claimed %d times", id, c)
	}
	counts, err := b.db.RunCountByStatus(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(n), counts[store.RunSucceeded])
}

func TestHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ApproveResumesAndDispatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`", "**Gate label** Review it")
		st := b.user(t, "ada", store.RoleSteward, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "slack:U9", Payload: map[string]any{"title": "T", "brief": "body"}})
		r := b.waitRun(t, it.ID, EventHoldOpened)
		require.Equal(t, store.RunSuspended, r.Status)
		require.Equal(t, StepHeld, r.Steps[3].Status)
		h := b.holdOf(t, r)
		require.Equal(t, store.HoldOpen, h.Status)
		require.Equal(t, "Review it", h.GateLabel)
		require.Contains(t, h.Preview, "body")

		got, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Comment: "lgtm", Decider: via(steward(st), "console")})
		require.NoError(t, err)
		require.Equal(t, store.HoldApproved, got.Status)
		require.Equal(t, "ada", got.DecidedBy)
		r = b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status)
		require.NotEmpty(t, r.DispatchMemoID)

		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Decider: via(steward(b.user(t, "bob", store.RoleAdmin, "")), "api")})
		require.ErrorIs(t, err, store.ErrConflict)
		require.Contains(t, err.Error(), "ada", "the conflict names who decided")
		audit, err := b.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Len(t, audit, 2)
		require.Equal(t, store.AttemptAccepted, audit[0].Outcome)
		require.Equal(t, store.AttemptConflict, audit[1].Outcome)
		types := b.eventTypes(t, it.SessionID)
		require.Contains(t, types, "hold_opened")
		require.Contains(t, types, "hold_decided")
	})

	t.Run("RejectCancels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Comment: "no", Decider: via(Decider{SlackUserID: "UST"}, "slack")})
		require.ErrorIs(t, err, store.ErrForbidden, "a Slack user who is no steward is refused")
		b.eng.cfg.SlackStewards = []string{"UST"}
		got, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Comment: "no", Decider: via(Decider{SlackUserID: "UST"}, "slack")})
		require.NoError(t, err)
		require.Equal(t, store.HoldRejected, got.Status)
		require.Equal(t, "slack:UST", got.DecidedBy)
		r, err := b.db.RunGetByID(ctx, h.RunID)
		require.NoError(t, err)
		require.Equal(t, store.RunCancelled, r.Status)
		require.Empty(t, r.DispatchMemoID)
		item, err := b.db.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, store.ItemFailed, item.Status)
	})

	t.Run("RefusesNonStewardAndRequester", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		viewer := b.user(t, "vic", store.RoleViewer, "")
		owner := b.user(t, "own", store.RoleSteward, "UOWN")
		it := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "slack:UOWN", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(viewer), "console")})
		require.ErrorIs(t, err, store.ErrForbidden)
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(owner), "console")})
		require.ErrorIs(t, err, store.ErrForbidden, "the requester (linked Slack id) may not approve")
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(Decider{SlackUserID: "UOWN"}, "slack")})
		require.ErrorIs(t, err, store.ErrForbidden, "nor from Slack")
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "maybe", Decider: via(steward(owner), "console")})
		require.ErrorIs(t, err, store.ErrInvalid)
		cur, err := b.db.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, cur.Status, "refusals change nothing")
		audit, err := b.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Len(t, audit, 3)
		for _, a := range audit {
			require.Equal(t, store.AttemptRefused, a.Outcome)
		}
	})

	t.Run("SelfApprovalAllowedByPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`", "**Self approval** `allowed`")
		owner := b.user(t, "own", store.RoleSteward, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "user:" + owner.ID, Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(owner), "console")})
		require.NoError(t, err)
		require.Equal(t, store.RunSucceeded, b.waitRun(t, it.ID, EventRunFinished).Status)
	})

	t.Run("TwoApprovalsNeedTwoStewards", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`", "**Approvals** `2`")
		s1, s2 := b.user(t, "s1", store.RoleSteward, ""), b.user(t, "s2", store.RoleAdmin, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		got, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s1), "console")})
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, got.Status)
		require.Len(t, got.Approvals, 1)
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s1), "api")})
		require.ErrorIs(t, err, store.ErrConflict, "one steward counts once")
		r, err := b.db.RunGetByID(ctx, h.RunID)
		require.NoError(t, err)
		require.Equal(t, store.RunSuspended, r.Status)
		got, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s2), "console")})
		require.NoError(t, err)
		require.Equal(t, store.HoldApproved, got.Status)
		require.Equal(t, store.RunSucceeded, b.waitRun(t, it.ID, EventRunFinished).Status)
	})

	// The decision names every approver, and the edit its author, who need
	// not be the last to approve.
	t.Run("TwoApprovalsNameBothAndTheEditor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`", "**Approvals** `2`")
		s1, s2 := b.user(t, "s1", store.RoleSteward, ""), b.user(t, "s2", store.RoleSteward, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: "# Better\n\nBetter.", Decider: via(steward(s1), "console")})
		require.NoError(t, err)
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s2), "console")})
		require.NoError(t, err)
		evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: it.SessionID})
		require.NoError(t, err)
		var decided *transcript.HoldDecided
		for _, ev := range evs {
			if d, ok := transcript.Read(ctx, b.eng.log, ev).(transcript.HoldDecided); ok {
				decided = &d
			}
		}
		require.NotNil(t, decided)
		require.Equal(t, []string{s1.Username, s2.Username}, decided.Approvers)
		require.Equal(t, s1.Username, decided.EditedBy)
		require.Equal(t, s2.Username, decided.DecidedBy)
	})

	t.Run("EditRules", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		st := b.user(t, "ada", store.RoleSteward, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"title": "Orig", "brief": "original"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Output: "# Other", Decider: via(steward(st), "api")})
		require.ErrorIs(t, err, store.ErrInvalid, "an edit comes only with an approval")
		audit, err := b.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Empty(t, audit, "a malformed request reaches no hold")
		// A form sends its edit box back as it was, with CRLF line ends: that is no edit.
		unchanged := strings.ReplaceAll(h.Output, "\n", "\r\n") + "\r\n"
		got, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Output: unchanged, Decider: via(steward(st), "console")})
		require.NoError(t, err)
		require.Equal(t, store.HoldRejected, got.Status)
		require.Nil(t, got.EditedOutput)
	})

	t.Run("ConcurrentDecisionsCountOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`", "**Approvals** `3`")
		stewards := make([]*store.User, 6)
		for i := range stewards {
			stewards[i] = b.user(t, fmt.Sprintf("s%d", i), store.RoleSteward, "")
		}
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		errs := make([]error, len(stewards))
		var wg sync.WaitGroup
		for i, s := range stewards {
			wg.Go(func() {
				_, errs[i] = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(s), "api")})
			})
		}
		wg.Wait()
		accepted := 0
		for _, err := range errs {
			if err == nil {
				accepted++
			} else {
				require.ErrorIs(t, err, store.ErrConflict)
			}
		}
		require.Equal(t, 3, accepted, "exactly the approvals needed are accepted; the rest find the hold decided")
		got, err := b.db.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldApproved, got.Status)
		require.Len(t, got.Approvals, 3)
		require.Equal(t, store.RunSucceeded, b.waitRun(t, it.ID, EventRunFinished).Status)
	})

	t.Run("EditedApprovalDispatchesTheEdit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		st := b.user(t, "ada", store.RoleSteward, "")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"title": "Orig", "brief": "original"}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		got, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: "# Edited\n\nbetter text", Decider: via(steward(st), "console")})
		require.NoError(t, err)
		require.Contains(t, got.Output, "original", "the hold keeps the run's own output")
		require.Equal(t, "# Edited\n\nbetter text", *got.EditedOutput)
		r := b.waitRun(t, it.ID, EventRunFinished)
		m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
		require.NoError(t, err)
		require.Equal(t, "Edited", m.Title)
		require.Equal(t, "# Edited\n\nbetter text", m.Body)
		audit, err := b.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, "# Edited\n\nbetter text", *audit[0].Output)
	})

	t.Run("TimeoutDecides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/held", "**Approval** `hold`", "**Hold timeout** `1h`", "**On timeout** `approve`")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "x"}})
		res, err := b.eng.RunPass(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Started)
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, store.RunSuspended, r.Status)
		res, err = b.eng.RunPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassResult{}, res, "an unexpired hold is left alone")
		b.clock.Advance(61 * time.Minute)
		_, err = b.eng.RunPass(ctx)
		require.NoError(t, err)
		h := b.holdOf(t, r)
		require.Equal(t, store.HoldApproved, h.Status)
		require.Equal(t, "timeout", h.DecidedVia)
		res, err = b.eng.RunPass(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Resumed)
		r, err = b.db.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunSucceeded, r.Status)
	})

	t.Run("ManualPostureHoldsYoloDoesNot", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/auto")
		b.workflow(t, "/held", "**Approval** `hold`")
		manual, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "manual"})
		require.NoError(t, err)
		yolo, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "yolo"})
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/auto", SessionID: manual.ID, Payload: map[string]any{"brief": "x"}})
		require.Equal(t, store.RunSuspended, b.waitRun(t, it.ID, EventHoldOpened).Status)
		it = b.enqueue(t, EnqueueParams{Command: "/held", SessionID: yolo.ID, Payload: map[string]any{"brief": "x"}})
		require.Equal(t, store.RunSucceeded, b.waitRun(t, it.ID, EventRunFinished).Status)
	})
}

// TestEnqueueRefusesBadInput: Enqueue is where every surface's items pass,
// so its input rules hold for the API, the console, Slack and the CLI alike
// (SPEC §4.2, §7). A refusal queues nothing.
func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	ctx := context.Background()
	b.workflow(t, "/draft")
	stub, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stub", Body: "stub"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		p    EnqueueParams
		want error
	}{
		{"UnknownTargetMemo", EnqueueParams{DedupeKey: "k1", Payload: map[string]any{"targetMemoId": "mem_missing"}}, store.ErrInvalid},
		{"TargetMemoNotAString", EnqueueParams{DedupeKey: "k2", Payload: map[string]any{"targetMemoId": 42}}, store.ErrInvalid},
		{"DedupeKeyTooLong", EnqueueParams{DedupeKey: strings.Repeat("k", store.MaxNameChars+1)}, store.ErrInvalid},
		{"DedupeKeyNUL", EnqueueParams{DedupeKey: "k\x00"}, store.ErrInvalid},
		{"DedupeKeyNotUTF8", EnqueueParams{DedupeKey: "k\xff"}, store.ErrInvalid},
		{"PayloadNUL", EnqueueParams{DedupeKey: "k3", Payload: map[string]any{"brief": map[string]any{"deep": []any{"a\x00"}}}}, store.ErrInvalid},
		{"PayloadTitleTooLong", EnqueueParams{DedupeKey: "k4", Payload: map[string]any{"title": strings.Repeat("t", store.MaxNameChars+1)}}, store.ErrInvalid},
		{"PayloadTooManyTags", EnqueueParams{DedupeKey: "k5", Payload: map[string]any{"tags": make([]any, store.MaxTags+1)}}, store.ErrInvalid},
		{"UnknownSession", EnqueueParams{DedupeKey: "k6", SessionID: "ses_missing"}, store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Command = "/draft"
			_, _, err := b.eng.Enqueue(ctx, tc.p)
			require.ErrorIs(t, err, tc.want)
			n, err := b.db.QueueItemCountPending(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "a refused enqueue queues nothing")
		})
	}
	it, created, err := b.eng.Enqueue(ctx, EnqueueParams{Command: "/draft", DedupeKey: strings.Repeat("k", store.MaxNameChars),
		Payload: map[string]any{"targetMemoId": stub.ID, "tags": []any{"a", "b"}}})
	require.NoError(t, err, "a known target and limits met are accepted")
	require.True(t, created)
	require.Equal(t, stub.ID, it.Payload["targetMemoId"])
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StubEditedByPersonConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		st := b.user(t, "ada", store.RoleSteward, "")
		stub, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stub", Body: "stub"})
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": "machine text", "targetMemoId": stub.ID}})
		h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
		human := "the person's text"
		_, err = b.db.MemoUpdate(ctx, &store.MemoUpdateParams{ID: stub.ID, ExpectedVersion: 1, Body: &human})
		require.NoError(t, err)
		_, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(steward(st), "console")})
		require.NoError(t, err)
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunFailed, r.Status)
		require.Equal(t, KindDispatchConflict, r.ErrorKind)
		require.NotContains(t, r.Error, "conflict:", "the reason, for people: %s", r.Error)
		require.NotContains(t, r.Error, "run settle", r.Error)
		require.Empty(t, r.DispatchMemoID)
		m, err := b.db.MemoGetByID(ctx, stub.ID)
		require.NoError(t, err)
		require.Equal(t, human, m.Body, "never clobber")
	})

	// A run asked with nothing to work on (no title, no brief) renders an
	// output of markup alone; publishing it would make an empty memo.
	t.Run("NoWordsNotPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/held", "**Approval** `hold`")
		it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"brief": " "}})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunFailed, r.Status)
		require.Equal(t, KindDispatch, r.ErrorKind)
		require.Contains(t, r.Error, "no words")
		require.Empty(t, r.DispatchMemoID)
		holds, err := b.db.HoldList(ctx, &store.HoldListParams{SessionID: r.SessionID})
		require.NoError(t, err)
		require.Empty(t, holds, "no steward is asked to review nothing")
	})

	t.Run("StubUpdatedInPlace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/draft")
		stub, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stub", Body: "stub"})
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "filled", "targetMemoId": stub.ID}})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		require.Equal(t, stub.ID, r.DispatchMemoID)
		m, err := b.db.MemoGetByID(ctx, stub.ID)
		require.NoError(t, err)
		require.Contains(t, m.Body, "filled")
		require.Equal(t, "Stub", m.Title)
		require.Equal(t, int64(2), m.ContentVersion)
	})

	t.Run("MoveGuard", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/draft")
		src, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Src", Body: "v1"})
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x",
			"source": map[string]any{"memoId": src.ID, "contentHash": src.ContentHash, "notesHash": store.HashContent("")}}})
		v2 := "v2"
		_, err = b.db.MemoUpdate(ctx, &store.MemoUpdateParams{ID: src.ID, ExpectedVersion: 1, Body: &v2})
		require.NoError(t, err)
		res, err := b.eng.RunPass(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.FailedItems)
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, KindDispatchConflict, r.ErrorKind)
		require.Contains(t, r.Error, "changed since enqueue")
	})

	t.Run("TitleFallbacks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		doc := strings.Replace(wfDoc("/plain"), "# {{.Payload.title}}\n", "", 1)
		_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
		require.NoError(t, err)
		static := strings.Replace(strings.Replace(wfDoc("/static"), "# {{.Payload.title}}\n", "", 1), "{{.Payload.brief}}", "Static words", 1)
		_, _, err = b.lib.ImportWorkflow(ctx, "", static)
		require.NoError(t, err)
		a := b.enqueue(t, EnqueueParams{Command: "/plain", Payload: map[string]any{"brief": "x", "title": "From payload"}})
		c := b.enqueue(t, EnqueueParams{Command: "/plain", Payload: map[string]any{"brief": "From the brief\nmore"}})
		d := b.enqueue(t, EnqueueParams{Command: "/static", Payload: map[string]any{}})
		_, err = b.eng.RunPass(ctx)
		require.NoError(t, err)
		for it, want := range map[string]string{a.ID: "From payload", c.ID: "From the brief",
			d.ID: "Workflow /static — " + time.Now().UTC().Format(time.DateOnly)} {
			r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it))
			require.NoError(t, err)
			m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
			require.NoError(t, err)
			require.Equal(t, want, m.Title)
		}
	})

	// A reply lands in the conversation the run was asked in (and from
	// there in its Slack thread, when it has one); a session the engine
	// made for the item alone is no conversation.
	t.Run("ReplyNeedsAConversation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/reply-held", "**Destination** `reply`", "**Approval** `hold`")
		b.workflow(t, "/reply", "**Destination** `reply`")
		it := b.enqueue(t, EnqueueParams{Command: "/reply-held", Payload: map[string]any{"brief": "x"}})
		_, err := b.eng.RunPass(ctx)
		require.NoError(t, err)
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, KindDispatch, r.ErrorKind)
		require.Contains(t, r.Error, "destination reply needs a conversation")
		require.Zero(t, r.TokensIn, "it fails before its model call")
		holds, err := b.db.HoldList(ctx, &store.HoldListParams{SessionID: r.SessionID})
		require.NoError(t, err)
		require.Empty(t, holds, "and before any steward is asked to approve it")

		ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
		require.NoError(t, err)
		it = b.enqueue(t, EnqueueParams{Command: "/reply", SessionID: ses.ID, Payload: map[string]any{"brief": "hello thread"}})
		_, err = b.eng.RunPass(ctx)
		require.NoError(t, err)
		r, err = b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, store.RunSucceeded, r.Status)
		require.Contains(t, b.eventTypes(t, it.SessionID), "assistant_message")
	})

	t.Run("GuardFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/draft")
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "FORBIDDEN words"}})
		_, err := b.eng.RunPass(ctx)
		require.NoError(t, err)
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, KindGuard, r.ErrorKind)
		require.Equal(t, StepFailed, r.Steps[2].Status)
		require.Equal(t, StepSkipped, r.Steps[3].Status)
		require.Contains(t, string(r.Guards), `"passed":false`)
	})

	t.Run("MissingTriggerMemoFailsLoad", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		b.workflow(t, "/draft")
		it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x", "sourceMemo": "No such memo"}})
		_, err := b.eng.RunPass(ctx)
		require.NoError(t, err)
		r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
		require.NoError(t, err)
		require.Equal(t, KindLoad, r.ErrorKind)
	})
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true, cfg: Config{StuckRun: time.Minute, MaxRecovery: 1}})
	b.workflow(t, "/draft")
	a := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x"}})
	// A runner that claims and dies: its runs stop heart-beating.
	dead := New(Config{RunnerID: "dead", DisableScheduler: true}, b.db, model.NewRegistry("template", model.Config{}), nil)
	runs, err := dead.claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, runs, 1)

	res, err := b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Recovered, "a fresh heartbeat is not stuck")
	b.clock.Advance(2 * time.Minute)
	res, err = b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Recovered)
	r, err := b.db.RunGetByID(ctx, store.RunIDForItem(a.ID))
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, r.Status, "recovered and resumed to the end")
	require.Equal(t, 1, r.RecoveryAttempts)

	// The dead runner's late writes are fenced off.
	require.Nil(t, dead.execute(ctx, runs[0]))

	c := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "y"}})
	_, err = dead.claim(ctx, 1)
	require.NoError(t, err)
	b.clock.Advance(2 * time.Minute)
	rec, ex, err := b.eng.recover(ctx) // taken over, but this runner dies too
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Empty(t, ex)
	b.clock.Advance(2 * time.Minute)
	res, err = b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Exhausted)
	r, err = b.db.RunGetByID(ctx, store.RunIDForItem(c.ID))
	require.NoError(t, err)
	require.Equal(t, store.RunRecoveryExhausted, r.Status)
	require.Equal(t, store.RunRecoveryExhausted, r.ErrorKind)
	item, err := b.db.QueueItemGetByID(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, store.ItemFailed, item.Status)
	require.Contains(t, b.eventTypes(t, c.SessionID), "run_finished")
}

// TestRecoveryOfAGoneRunner: a run whose runner's lease has lapsed is
// recovered once its heartbeat is a lease's length old, long before
// StuckRun; a runner still holding its lease, or one that never held one,
// keeps its run until StuckRun.
func TestRecoveryOfAGoneRunner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		lease     time.Duration // the runner lease's ttl from now; 0: none taken
		recovered int
	}{
		{"LeaseLapsed", time.Second, 1},
		{"LeaseHeld", time.Hour, 0},
		{"NeverHeldOne", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{noStart: true, cfg: Config{StuckRun: time.Hour, PassInterval: time.Minute}})
			b.workflow(t, "/draft")
			b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x"}})
			other := New(Config{RunnerID: "other", DisableScheduler: true, Now: b.clock.Now}, b.db, model.NewRegistry("template", model.Config{}), nil)
			if tc.lease > 0 {
				_, err := b.db.LeaseAcquire(ctx, runnerLeaseName("other"), "other", b.clock.Now(), tc.lease)
				require.NoError(t, err)
			}
			runs, err := other.claim(ctx, 1)
			require.NoError(t, err)
			require.Len(t, runs, 1)

			res, err := b.eng.RunPass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Recovered, "a fresh heartbeat is never taken")
			b.clock.Advance(2 * time.Minute) // past the lease's length (1.5 × PassInterval), short of StuckRun
			res, err = b.eng.RunPass(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.recovered, res.Recovered)
		})
	}
}

// TestGoneRunnersLeasesArePruned: a leader pass drops the runner leases
// that lapsed more than StuckRun ago (one row per process start would
// pile up otherwise); by then the StuckRun rule covers any run such a
// runner left, so nothing is recovered later for the lease being gone.
// Leases that lapsed lately, live ones and the leader's stay.
func TestGoneRunnersLeasesArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true, cfg: Config{StuckRun: time.Hour, PassInterval: time.Minute}})
	start := b.clock.Now()
	for name, ttl := range map[string]time.Duration{"old": time.Second, "recent": 45 * time.Minute, "alive": 3 * time.Hour} {
		_, err := b.db.LeaseAcquire(ctx, runnerLeaseName(name), name, start, ttl)
		require.NoError(t, err)
	}
	b.clock.Advance(90 * time.Minute)
	_, err := b.eng.RunPass(ctx)
	require.NoError(t, err)
	for name, kept := range map[string]bool{"old": false, "recent": true, "alive": true} {
		_, err := b.db.LeaseGet(ctx, runnerLeaseName(name))
		if kept {
			require.NoError(t, err, name)
		} else {
			require.ErrorIs(t, err, store.ErrNotFound, name)
		}
	}
}

func TestCancelInFlightModelCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{blockLLM: true})
	doc := strings.Replace(wfDoc("/slow"), "## Policy\n", "## Policy\n- **Model** `openai:slow-model`\n", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
	require.NoError(t, err)
	it := b.enqueue(t, EnqueueParams{Command: "/slow", SessionID: ses.ID, Payload: map[string]any{"brief": "x"}})
	select {
	case <-b.llm.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("model was never called")
	}
	// Anyone who may write to the session may stop its running runs
	// (SPEC §4.3); only held ones wait for a steward.
	c, err := b.eng.CancelSessionRuns(ctx, ses.ID, Decider{SlackUserID: "UNOBODY", Via: "slack"})
	require.NoError(t, err)
	require.Equal(t, Cancelled{Runs: 1}, c)
	r := b.waitRun(t, it.ID, EventRunFinished)
	require.Equal(t, store.RunCancelled, r.Status)
	require.Equal(t, KindCancelled, r.ErrorKind)
	require.Contains(t, r.Error, "UNOBODY")
}

// TestCancelHeldRunIsARejection: cancelling a session's held run is a
// steward's rejection of its hold (comment `terminated`), audited and
// recorded like any other; a non-steward's terminate leaves it open.
func TestCancelHeldRunIsARejection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/held", "**Approval** `hold`")
	ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto"})
	require.NoError(t, err)
	it := b.enqueue(t, EnqueueParams{Command: "/held", SessionID: ses.ID, Payload: map[string]any{"brief": "x"}})
	h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))

	c, err := b.eng.CancelSessionRuns(ctx, ses.ID, Decider{SlackUserID: "UNOBODY", Via: "slack"})
	require.NoError(t, err)
	require.Equal(t, Cancelled{HeldOpen: 1}, c, "a non-steward's terminate leaves the held run open and says so")
	got, err := b.db.HoldGetByID(ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, got.Status)
	audit, err := b.db.HoldDecisionList(ctx, h.ID)
	require.NoError(t, err)
	require.Empty(t, audit)

	ada := b.user(t, "ada", store.RoleSteward, "")
	c, err = b.eng.CancelSessionRuns(ctx, ses.ID, via(steward(ada), "console"))
	require.NoError(t, err)
	require.Equal(t, Cancelled{Runs: 1}, c)
	got, err = b.db.HoldGetByID(ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, []string{store.HoldRejected, "ada", "console", "terminated"}, []string{got.Status, got.DecidedBy, got.DecidedVia, got.Comment})
	audit, err = b.db.HoldDecisionList(ctx, h.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, []string{"reject", store.AttemptAccepted, "console"}, []string{audit[0].Decision, audit[0].Outcome, audit[0].Via})
	r, err := b.db.RunGetByID(ctx, h.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunCancelled, r.Status)
	require.Contains(t, b.eventTypes(t, ses.ID), EventHoldDecided, "the transcript (and so the Slack card) learns of the rejection")
}

func TestScheduleEnqueuesMissedSlotOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true})
	doc := strings.Replace(wfDoc("/tick"), "- **Status**", "- **Invoke** `every 1h`\n- **Status**", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	list, err := b.eng.schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	slot := list[0].sched.Prev(time.Now())
	require.False(t, slot.After(list[0].since), "the latest slot predates the new workflow, so a first start does not owe it")
	for range 2 { // two starts, one item
		b.eng.enqueueSlot(ctx, list[0], slot)
	}
	n, err := b.db.QueueItemCountPending(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func TestSchedulerEnqueuesTheMissedSlotAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := testdb.New(t)
	db := data.Open(t)
	doc := strings.Replace(wfDoc("/hourly"), "- **Status**", "- **Invoke** `every 1h`\n- **Status**", 1)
	memo, _, err := library.New(db, nil).ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	// The workflow has existed for a day, so the latest hourly slot is one
	// the service missed while down (slots before a workflow existed are not).
	data.Exec(t, fmt.Sprintf(`UPDATE memos SET created_at = '%s' WHERE id = '%s'`,
		time.Now().UTC().Add(-24*time.Hour).Format("2006-01-02T15:04:05.000000Z"), memo.ID))

	e := New(Config{PassInterval: time.Hour}, db, model.NewRegistry("template", model.Config{}), nil)
	finished := make(chan Event, 16)
	e.Subscribe(func(ev Event) {
		if ev.Kind == EventRunFinished {
			finished <- ev
		}
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Start(runCtx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var ev Event
	select {
	case ev = <-finished:
	case <-time.After(15 * time.Second):
		t.Fatal("the missed slot was never run")
	}
	it, err := db.QueueItemGetByID(ctx, ev.ItemID)
	require.NoError(t, err)
	want := time.Now().UTC().Truncate(time.Hour)
	if time.Now().UTC().Sub(want) < time.Second { // started right on the hour
		t.Skip("slot boundary")
	}
	require.Equal(t, want.Format(time.RFC3339), it.DedupeKey, "the dedupe key is the slot time")
	require.Equal(t, "/hourly", it.Command)
	require.Equal(t, "engine", it.OwnerUID)
}

func TestModelErrorKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		fail    int32
		block   bool
		timeout string
		want    string
	}{
		{"ServerErrorsExhaustRetries", 500, false, "30s", KindModelTransient},
		{"BadRequestIsNotRetried", 400, false, "30s", KindModel},
		{"StepTimeout", 0, true, "200ms", KindTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{noStart: true, blockLLM: c.block})
			b.llm.Fail.Store(c.fail)
			doc := strings.Replace(wfDoc("/m"), "- **Timeout** `30s`", "- **Timeout** `"+c.timeout+"`\n- **Model** `openai:m`\n- **Retries** `1`", 1)
			_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
			require.NoError(t, err)
			it := b.enqueue(t, EnqueueParams{Command: "/m", Payload: map[string]any{"brief": "x"}})
			res, err := b.eng.RunPass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.FailedItems)
			r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
			require.NoError(t, err)
			require.Equal(t, store.RunFailed, r.Status)
			require.Equal(t, c.want, r.ErrorKind, r.Error)
			require.Equal(t, c.want, r.Steps[1].ErrorKind)
			if c.fail == 500 {
				require.Equal(t, 2, r.Steps[1].Attempts, "one retry")
				require.Equal(t, int64(2), b.llm.Calls())
			}
			if c.fail == 400 {
				require.Equal(t, int64(1), b.llm.Calls())
			}
		})
	}
}

func TestShutdownReleasesInFlightRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true, blockLLM: true})
	doc := strings.Replace(wfDoc("/slow"), "## Policy\n", "## Policy\n- **Model** `openai:slow-model`\n", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	it := b.enqueue(t, EnqueueParams{Command: "/slow", Payload: map[string]any{"brief": "x"}})

	first := New(Config{Workers: 1, StuckRun: time.Hour, PassInterval: time.Hour, DisableScheduler: true}, b.db,
		model.NewRegistry("template", model.Config{OpenAIBaseURL: b.llm.URL, HTTPClient: b.llm.Client()}), nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = first.Start(runCtx)
	}()
	select {
	case <-b.llm.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("model was never called")
	}
	stop()
	<-done // Start returns only once its worker has let go of the run

	r, err := b.db.RunGetByID(ctx, store.RunIDForItem(it.ID))
	require.NoError(t, err)
	require.Equal(t, store.RunRunning, r.Status, "shutdown neither fails nor finishes the run")
	b.llm.Unblock()
	// Released, so the next process recovers it at once, not after StuckRun (1h).
	second := New(Config{Workers: 1, StuckRun: time.Hour, DisableScheduler: true}, b.db,
		model.NewRegistry("template", model.Config{OpenAIBaseURL: b.llm.URL, HTTPClient: b.llm.Client()}), nil)
	res, err := second.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Recovered)
	r, err = b.db.RunGetByID(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, r.Status, r.Error)
}

// via is d acting through a surface.
func via(d Decider, surface string) Decider {
	d.Via = surface
	return d
}

// TestTitled: an item asked with a brief and no title is titled by the
// brief's first line, whichever surface asked (API, CLI, console, Slack).
func TestTitled(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("otter ", 20)
	for _, tc := range []struct {
		in   map[string]any
		want any
	}{
		{map[string]any{"brief": "Count the otters\nin winter"}, "Count the otters"},
		{map[string]any{"brief": "# A heading\nbody"}, "A heading"},
		{map[string]any{"brief": "\n\n  first real line  \n"}, "first real line"},
		{map[string]any{"brief": long}, strings.TrimSpace(long[:78]) + "…"}, // cut between words
		{map[string]any{"brief": "b", "title": "Given"}, "Given"},
		// A title is text: the brief's markup is read, never cut open.
		{map[string]any{"brief": "Tides and *bold phrase number one* and [a link](https://x.example) `code`"},
			"Tides and bold phrase number one and a link code"},
		{map[string]any{"brief": strings.Repeat("word ", 14) + "*bold phrase number seven here* tail"},
			strings.Repeat("word ", 14) + "bold…"},
		{map[string]any{"brief": "  "}, nil},
		{map[string]any{}, nil},
		{nil, nil},
	} {
		before := maps.Clone(tc.in)
		got := titled(tc.in)
		require.Equal(t, tc.want, got["title"], "%v", tc.in)
		require.Equal(t, before, tc.in, "the caller's map is not changed")
	}
}

// TestPeopleIn: engine texts name people by identity; readers see names.
func TestPeopleIn(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"rejected by slack:U12AB: no":             "rejected by Slack user U12AB: no",
		"already approved by key:key_33ms0a, ada": "already approved by API key key_33ms0a, ada",
		"asked by engine":                         "asked by engine", // a plain word is not an identity
		"slack:general and key:value":             "slack:general and key:value",
	} {
		require.Equal(t, want, PeopleIn(in, nil), in)
	}
	mention := func(uid string) string { return "<@" + strings.TrimPrefix(uid, "slack:") + ">" }
	require.Equal(t, "by <@U1>", PeopleIn("by slack:U1", mention))
}
