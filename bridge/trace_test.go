package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	out := map[string]any{}
	for _, a := range s.Attributes() {
		out[string(a.Key)] = a.Value.AsInterface()
	}
	return out
}

// TestOneTraceFromMentionToMemoPost: a Slack mention that enqueues a held
// run, approved from its card, dispatched — one trace from the mention's
// delivery to the post of the memo into the thread, with the session's
// provenance on the run and the GenAI attributes on the model call.
func TestOneTraceFromMentionToMemoPost(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb := setup(t, setupOpts{real: true, tracer: tp})

	root := tb.ts()
	tb.event(t, "EvTrace1", mention("CT", "U1", root, "", "draft-memo Otters\nOtters hold hands while they sleep."))
	card, holdID := tb.holdCard(t, "CT", root)
	require.Equal(t, 200, tb.click(t, "USTEWARD", "hold_approve", holdID, "CT", card.TS, root))
	tb.waitPost(t, "CT", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Memo dispatched") })

	var delivery sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "slack.delivery" && spanAttrs(s)["slack.delivery.key"] == "app_mention:CT:"+root {
			delivery = s
		}
	}
	require.NotNil(t, delivery, "the mention's delivery is a span")
	tid := delivery.SpanContext().TraceID()
	inTrace := func() map[string][]sdktrace.ReadOnlySpan {
		out := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == tid {
				out[s.Name()] = append(out[s.Name()], s)
			}
		}
		return out
	}
	memoPost := func(spans map[string][]sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		for _, s := range spans["slack.post"] {
			if strings.HasSuffix(spanAttrs(s)["slack.outbox.key"].(string), ":lead") {
				return s
			}
		}
		return nil
	}
	tb.eventually(t, func() bool { return memoPost(inTrace()) != nil }, 10*time.Second,
		"the post of the memo joins the mention's trace")

	spans := inTrace()
	for _, name := range []string{"workflow.enqueue", "workflow.run", "workflow.step", "chat template", "workflow.hold", "workflow.dispatch"} {
		require.NotEmpty(t, spans[name], "%s is in the trace (have %v)", name, keys(spans))
	}
	require.Equal(t, delivery.SpanContext().SpanID(), spans["workflow.enqueue"][0].Parent().SpanID())
	require.Len(t, spans["workflow.run"], 2, "held, then resumed after the approval")
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:CT:"+root)
	require.NoError(t, err)
	for _, r := range spans["workflow.run"] {
		a := spanAttrs(r)
		require.Equal(t, ses.ID, a["holdfast.session.id"])
		require.Equal(t, "channel", a["holdfast.session.origin"])
		require.Equal(t, "slack", a["holdfast.session.platform"])
		require.Equal(t, "slack", a["holdfast.surface"])
		require.Equal(t, "/draft-memo", a["holdfast.workflow.command"])
		require.Equal(t, []string{"slack:CT:" + root}, a["holdfast.session.tags"])
	}
	model := spanAttrs(spans["chat template"][0])
	require.Equal(t, "chat", model["gen_ai.operation.name"])
	require.Equal(t, "template", model["gen_ai.request.model"])
	require.Positive(t, model["gen_ai.usage.input_tokens"])
	require.Positive(t, model["gen_ai.usage.output_tokens"])
	require.Equal(t, trace.SpanKindClient, memoPost(spans).SpanKind())
	var cardPosted bool
	for _, s := range spans["slack.post"] {
		if strings.HasPrefix(spanAttrs(s)["slack.outbox.key"].(string), "card:"+holdID) {
			cardPosted = true
		}
	}
	require.True(t, cardPosted, "the hold card's post is in the trace too")
	wait := spans["workflow.hold"][0]
	require.Len(t, wait.Links(), 1, "the hold wait links the click that decided it")
	require.NotEqual(t, tid, wait.Links()[0].SpanContext.TraceID())
}

func keys(m map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
