package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/storetest"
)

func TestTokenBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The template model counts words: the prompt "# T / one two three
	// four" is 6 tokens in and 6 out, 12 in all.
	payload := map[string]any{"title": "T", "brief": "one two three four"}
	for _, tc := range []struct {
		name         string
		policy       []string
		decision     string
		outputReview bool
		want         string
	}{
		{"ApprovalGoesOn", []string{"**Token budget** `10`"}, "approve", false, store.RunSucceeded},
		{"ApprovalLeavesTheOutputReviewToDo", []string{"**Token budget** `10`", "**Approval** `hold`"}, "approve", true, store.RunSucceeded},
		{"RejectionCancels", []string{"**Token budget** `10`"}, "reject", false, store.RunCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.workflow(t, "/budget", tc.policy...)
			st := steward(b.user(t, "ada", store.RoleSteward, ""))
			it := b.enqueue(t, EnqueueParams{Command: "/budget", OwnerUID: "slack:U9", Payload: payload})

			r := b.waitRun(t, it.ID, EventHoldOpened)
			require.Equal(t, store.RunSuspended, r.Status)
			h := b.holdOf(t, r)
			require.Equal(t, budgetHoldID(r.ID), h.ID)
			require.Equal(t, "Token budget 10 passed (12 used)", h.GateLabel, "the gate label names the budget and the tokens used")
			require.Equal(t, StepSucceeded, r.Steps[1].Status, "the model call that passed the budget finished")
			require.Equal(t, StepHeld, r.Steps[2].Status, "the run is held before its next step")
			require.Equal(t, []any{"template", int64(6), int64(6)}, []any{r.Model, r.TokensIn, r.TokensOut})

			_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: tc.decision, Decider: via(st, "console")})
			require.NoError(t, err)
			if tc.outputReview {
				r = b.waitRun(t, it.ID, EventHoldOpened)
				out := b.holdOf(t, r)
				require.Equal(t, store.HoldIDForRun(r.ID), out.ID, "the output's review is a hold of its own")
				require.Equal(t, "Review output", out.GateLabel)
				require.Equal(t, StepHeld, r.Steps[3].Status)
				_, err := b.eng.Decide(ctx, DecideParams{HoldID: out.ID, Decision: "approve", Decider: via(st, "api")})
				require.NoError(t, err)
			}
			r = b.waitRun(t, it.ID, EventRunFinished)
			require.Equal(t, tc.want, r.Status, r.Error)
			if tc.want == store.RunSucceeded {
				require.NotEmpty(t, r.DispatchMemoID)
				got, err := b.db.RunGetByID(ctx, r.ID)
				require.NoError(t, err)
				require.Equal(t, int64(12), got.TokensIn+got.TokensOut, "held once: the budget is not asked for again")
			} else {
				require.Empty(t, r.DispatchMemoID)
			}
			holds, err := b.db.HoldList(ctx, &store.HoldListParams{SessionID: it.SessionID, Limit: 10})
			require.NoError(t, err)
			want := 1
			if tc.outputReview {
				want = 2
			}
			require.Len(t, holds, want)
		})
	}

	t.Run("UnderBudgetRunsThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.workflow(t, "/budget", "**Token budget** `1,000`")
		it := b.enqueue(t, EnqueueParams{Command: "/budget", Payload: payload})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		require.Empty(t, r.HoldID)
		u, err := b.db.UsageList(ctx, &store.UsageListParams{GroupBy: store.UsageByWorkflow})
		require.NoError(t, err)
		require.Equal(t, []*store.Usage{{Key: "/budget", Runs: 1, TokensIn: 6, TokensOut: 6}}, u)
	})
}

// spansOf answers the ended spans of trace tid by name.
func spansOf(rec *tracetest.SpanRecorder, tid trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == tid {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	out := map[string]any{}
	for _, a := range s.Attributes() {
		out[string(a.Key)] = a.Value.AsInterface()
	}
	return out
}

// spanEnds signals every span's end (after the recorder before it has it),
// so a test waits for a span to end instead of polling the recorder.
type spanEnds chan struct{}

func (s spanEnds) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s spanEnds) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case s <- struct{}{}:
	default: // a signal is already waiting
	}
}
func (s spanEnds) Shutdown(context.Context) error   { return nil }
func (s spanEnds) ForceFlush(context.Context) error { return nil }

func TestTracesFollowTheItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec, ends := tracetest.NewSpanRecorder(), make(spanEnds, 1)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(ends))
	b := setup(t, setupOpts{cfg: Config{Tracer: tp}})
	doc := strings.Replace(wfDoc("/traced", "**Approval** `hold`"), "## Policy\n", "## Policy\n- **Model** `openai:gpt-test`\n", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)

	// What a Slack delivery's span is to a mention that enqueues.
	dctx, delivery := tp.Tracer("test").Start(ctx, "slack.delivery")
	it, _, err := b.eng.Enqueue(dctx, EnqueueParams{Command: "/traced", OwnerUID: "slack:U9",
		Payload: map[string]any{"title": "Traced", "brief": "a b c"}})
	require.NoError(t, err)
	delivery.End()
	tid := delivery.SpanContext().TraceID()
	r := b.waitRun(t, it.ID, EventHoldOpened)
	h := b.holdOf(t, r)

	cctx, click := tp.Tracer("test").Start(ctx, "slack.delivery")
	st := steward(b.user(t, "ada", store.RoleSteward, ""))
	_, err = b.eng.Decide(cctx, DecideParams{HoldID: h.ID, Decision: "approve", Decider: via(st, "slack")})
	require.NoError(t, err)
	click.End()
	r = b.waitRun(t, it.ID, EventRunFinished)
	require.Equal(t, store.RunSucceeded, r.Status, r.Error)
	storetest.Wait(t, func() bool { return len(spansOf(rec, tid)["workflow.run"]) == 2 }, 10*time.Second,
		[]func() <-chan struct{}{func() <-chan struct{} { return ends }}, "the resumed run's span ends once its settle has committed")
	h, err = b.db.HoldGetByID(ctx, h.ID)
	require.NoError(t, err)

	spans := spansOf(rec, tid)
	enq := spans["workflow.enqueue"]
	require.Len(t, enq, 1)
	require.Equal(t, delivery.SpanContext().SpanID(), enq[0].Parent().SpanID(), "the enqueue is a child of the delivery")
	require.Equal(t, it.ID, attrs(enq[0])["holdfast.item.id"])

	runs := spans["workflow.run"]
	for _, s := range runs {
		require.Equal(t, enq[0].SpanContext().SpanID(), s.Parent().SpanID(), "each execution joins the item's trace")
		a := attrs(s)
		require.Equal(t, it.SessionID, a["holdfast.session.id"])
		require.Equal(t, store.OriginWorkflow, a["holdfast.session.origin"])
		require.Equal(t, "", a["holdfast.session.platform"])
		require.Equal(t, []string{"workflow:" + it.ID}, a["holdfast.session.tags"])
		require.Equal(t, "slack", a["holdfast.surface"])
		require.Equal(t, "/traced", a["holdfast.workflow.command"])
		require.Equal(t, r.ID, a["holdfast.run.id"])
	}
	statuses := []any{attrs(runs[0])["holdfast.run.status"], attrs(runs[1])["holdfast.run.status"]}
	require.ElementsMatch(t, []any{store.RunSuspended, store.RunSucceeded}, statuses)
	require.Len(t, spans["workflow.step"], 5, "four steps, then the output again after the approval")

	chat := spans["chat gpt-test"]
	require.Len(t, chat, 1)
	require.Equal(t, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
		"gen_ai.usage.input_tokens": int64(3), "gen_ai.usage.output_tokens": int64(5)}, attrs(chat[0]))
	require.Equal(t, trace.SpanKindClient, chat[0].SpanKind())
	var process sdktrace.ReadOnlySpan
	for _, s := range spans["workflow.step"] {
		if attrs(s)["holdfast.step.kind"] == "process" {
			process = s
		}
	}
	require.NotNil(t, process)
	require.Equal(t, process.SpanContext().SpanID(), chat[0].Parent().SpanID(), "the model call is a child of its step")

	wait := spans["workflow.hold"]
	require.Len(t, wait, 1)
	require.Equal(t, enq[0].SpanContext().SpanID(), wait[0].Parent().SpanID())
	require.True(t, wait[0].StartTime().Equal(h.CreatedAt), "the wait starts when the hold opened")
	require.True(t, wait[0].EndTime().Equal(*h.DecidedAt), "and ends when it was decided")
	require.Equal(t, store.HoldApproved, attrs(wait[0])["holdfast.hold.status"])
	require.Len(t, wait[0].Links(), 1)
	require.Equal(t, click.SpanContext().SpanID(), wait[0].Links()[0].SpanContext.SpanID(), "linked to the decision's span")

	disp := spans["workflow.dispatch"]
	require.Len(t, disp, 1)
	require.Equal(t, r.DispatchMemoID, attrs(disp[0])["holdfast.memo.id"])
	require.Equal(t, "memo", attrs(disp[0])["holdfast.dispatch.destination"])
}

func TestRecoveredRunContinuesItsTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := setup(t, setupOpts{noStart: true, cfg: Config{StuckRun: time.Minute, Tracer: tp}})
	b.workflow(t, "/draft")
	rctx, root := tp.Tracer("test").Start(ctx, "api.request")
	it, _, err := b.eng.Enqueue(rctx, EnqueueParams{Command: "/draft", OwnerUID: "key:k1", Payload: map[string]any{"brief": "x"}})
	require.NoError(t, err)
	root.End()
	// A runner that claims and dies (as under kill -9): no span of its
	// survives, only the item's trace context.
	dead := New(Config{RunnerID: "dead", DisableScheduler: true}, b.db, model.NewRegistry("template", model.Config{}), nil)
	runs, err := dead.claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	b.clock.Advance(2 * time.Minute)
	res, err := b.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Recovered)

	spans := spansOf(rec, root.SpanContext().TraceID())
	require.Len(t, spans["workflow.run"], 1, "the recovered execution joins the trace that enqueued it")
	a := attrs(spans["workflow.run"][0])
	require.Equal(t, int64(1), a["holdfast.run.recovery_attempts"])
	require.Equal(t, store.RunSucceeded, a["holdfast.run.status"])
	require.Equal(t, "api", a["holdfast.surface"])
	require.Equal(t, spans["workflow.enqueue"][0].SpanContext().SpanID(), spans["workflow.run"][0].Parent().SpanID())
	require.Len(t, spans["workflow.dispatch"], 1)
	_ = it
}

func TestUntracedEngineCarriesNoTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noStart: true})
	b.workflow(t, "/draft")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	defer span.End()
	it, _, err := b.eng.Enqueue(ctx, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "x"}})
	require.NoError(t, err)
	got, err := b.db.QueueItemGetByID(context.Background(), it.ID)
	require.NoError(t, err)
	require.Empty(t, got.TraceContext, "with tracing off nothing is recorded for it")
}

func TestEdgesLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/draft")
	failed := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "FORBIDDEN words"}})
	fr := b.waitRun(t, failed.ID, EventRunFinished)
	require.Equal(t, KindGuard, fr.ErrorKind)
	_, _, err := b.lib.ImportWorkflow(ctx, "", "# Broken\n\n## Trigger\n- **Command** `/broken`\n")
	require.NoError(t, err)

	doc := strings.ReplaceAll(`# Edges report

## Trigger
- **Command** ¦/edges¦
- **Status** ¦live¦

## Load Contract
- **Edges** ¦7d¦

## Steps
1. **Context** Read the week's edges.
2. **Process** Report them.
   ¦¦¦prompt
   # Edges {{.Edges.Window}} total={{.Edges.Total}}
   {{range .Edges.Kinds}}{{.Kind}}={{.Count}} {{range .Latest}}{{.Ref}} {{.Link}} {{end}}
   {{end}}{{range .Context}}{{if eq .Class "edges"}}{{.Title}}: {{.Body}}{{end}}{{end}}
   ¦¦¦
3. **Output** Publish.

## Policy
- **Approval** ¦auto¦
`, "¦", "`")
	_, _, err = b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	it := b.enqueue(t, EnqueueParams{Command: "/edges"})
	r := b.waitRun(t, it.ID, EventRunFinished)
	require.Equal(t, store.RunSucceeded, r.Status, r.Error)
	m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
	require.NoError(t, err)
	for _, want := range []string{
		"# Edges 7d total=2",
		fmt.Sprintf("guard=1 %s /runs/%s", fr.ID, fr.ID),
		"workflow_broken=1",
		"/workflows/broken",
		"Edges of understanding (last 7d): - **Runs whose output failed a Guard**: 1",
		"- **Workflows that do not compile**: 1",
	} {
		require.Contains(t, m.Body, want)
	}
}

func TestWeeklyDigestReportsEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	require.NoError(t, library.New(b.db, slog.New(slog.DiscardHandler)).SeedExamples(ctx))
	for _, tc := range []struct {
		name, want string
	}{
		{"NothingYet", "Nothing went unresolved in this window."},
		{"AfterAGuardFailure", "- **Runs whose output failed a Guard**: 1"},
	} {
		if tc.name == "AfterAGuardFailure" {
			b.workflow(t, "/draft")
			it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"brief": "FORBIDDEN"}})
			require.Equal(t, KindGuard, b.waitRun(t, it.ID, EventRunFinished).ErrorKind)
		}
		it := b.enqueue(t, EnqueueParams{Command: "/weekly-digest"})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
		require.NoError(t, err)
		require.Contains(t, m.Body, "## Edges of understanding", tc.name)
		require.Contains(t, m.Body, tc.want, tc.name)
	}
}
