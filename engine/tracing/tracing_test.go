package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

func TestTraceparentRoundTrip(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	ctx, span := tracing.Tracer(tp).Start(context.Background(), "x")
	defer span.End()
	tc := tracing.FromContext(ctx)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tc)
	sc, ok := tracing.Parse(tc)
	require.True(t, ok)
	require.Equal(t, span.SpanContext().TraceID(), sc.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sc.SpanID())
	require.True(t, sc.IsRemote())

	child, cspan := tracing.Tracer(tp).Start(tracing.Join(context.Background(), tc), "y")
	defer cspan.End()
	require.Equal(t, span.SpanContext().TraceID(), trace.SpanContextFromContext(child).TraceID(), "a joined span continues the trace")

	for _, bad := range []string{"", "00-", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz"} {
		_, ok := tracing.Parse(bad)
		require.False(t, ok, bad)
		require.Equal(t, context.Background(), tracing.Join(context.Background(), bad))
	}
	require.Empty(t, tracing.FromContext(context.Background()))
	_, noop := tracing.Tracer(nil).Start(context.Background(), "z")
	require.False(t, noop.IsRecording(), "no provider: nothing is recorded")
}

func TestLogLinesCarryTraceID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("run_id", "r1"))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, span := tracing.Tracer(tp).Start(context.Background(), "x")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var in, out map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &in))
	require.NoError(t, json.Unmarshal(lines[1], &out))
	require.Equal(t, span.SpanContext().TraceID().String(), in["trace_id"])
	require.Equal(t, "r1", in["run_id"])
	require.NotContains(t, out, "trace_id")
}

func TestSurfaceAndProvenance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uid, origin, want string }{
		{"slack:U1", store.OriginChannel, tracing.SurfaceSlack},
		{"user:u1", store.OriginUser, tracing.SurfaceConsole},
		{"key:k1", store.OriginAPI, tracing.SurfaceAPI},
		{"key:k1", store.OriginAgent, tracing.SurfaceAgent},
		{"cli", store.OriginWorkflow, tracing.SurfaceCLI},
		{"engine", store.OriginWorkflow, tracing.SurfaceSchedule},
	} {
		require.Equal(t, tc.want, tracing.SurfaceOf(tc.uid, tc.origin), tc)
	}
	kv := tracing.Provenance(&store.Session{ID: "ses_1", Origin: "channel", Platform: "slack", Tags: []string{"slack:C1:1.2"}},
		tracing.SurfaceSlack, "/draft-memo")
	got := map[string]any{}
	for _, a := range kv {
		got[string(a.Key)] = a.Value.AsInterface()
	}
	require.Equal(t, map[string]any{"holdfast.surface": "slack", "holdfast.workflow.command": "/draft-memo",
		"holdfast.session.id": "ses_1", "holdfast.session.origin": "channel", "holdfast.session.platform": "slack",
		"holdfast.session.tags": []string{"slack:C1:1.2"}}, got)
}
