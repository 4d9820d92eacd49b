// Package tracing is Holdfast's OpenTelemetry vocabulary (SPEC §10): the
// tracer every part starts its spans from, the W3C trace context that queue
// items and Slack writes carry across processes and crashes, the provenance
// and GenAI attributes, and a slog handler that stamps trace ids on log
// lines. It depends on the OpenTelemetry API only; cmd/bot installs the SDK
// and the OTLP exporter when an endpoint is configured, and without one
// every tracer here is a no-op that records and exports nothing.
package tracing

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/holdfast-bot/holdfast/store"
)

// ScopeName names Holdfast's instrumentation scope.
const ScopeName = "github.com/holdfast-bot/holdfast"

// Tracer is Holdfast's tracer from tp; a nil tp is a no-op tracer.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Span names.
const (
	SpanSlackDelivery = "slack.delivery"
	SpanSlackPost     = "slack.post"
	SpanChatTurn      = "chat.turn"
	SpanEnqueue       = "workflow.enqueue"
	SpanRun           = "workflow.run"
	SpanStep          = "workflow.step"
	SpanHold          = "workflow.hold"
	SpanDispatch      = "workflow.dispatch"
)

// Attribute keys: provenance (seed 003's Langfuse filter tags) on run and
// turn spans, Holdfast's own ids, and the OpenTelemetry GenAI semantic
// conventions on model calls.
const (
	SessionID       = attribute.Key("holdfast.session.id")
	SessionOrigin   = attribute.Key("holdfast.session.origin")
	SessionPlatform = attribute.Key("holdfast.session.platform")
	SessionTags     = attribute.Key("holdfast.session.tags")
	Surface         = attribute.Key("holdfast.surface")
	WorkflowCommand = attribute.Key("holdfast.workflow.command")

	ItemID      = attribute.Key("holdfast.item.id")
	RunID       = attribute.Key("holdfast.run.id")
	RunStatus   = attribute.Key("holdfast.run.status")
	RunAttempt  = attribute.Key("holdfast.run.recovery_attempts")
	ErrorKind   = attribute.Key("holdfast.error.kind")
	StepIndex   = attribute.Key("holdfast.step.index")
	StepKind    = attribute.Key("holdfast.step.kind")
	HoldIDKey   = attribute.Key("holdfast.hold.id")
	HoldGate    = attribute.Key("holdfast.hold.gate_label")
	HoldStatus  = attribute.Key("holdfast.hold.status")
	HoldVia     = attribute.Key("holdfast.hold.decided_via")
	TokensUsed  = attribute.Key("holdfast.tokens.used")
	Destination = attribute.Key("holdfast.dispatch.destination")
	MemoID      = attribute.Key("holdfast.memo.id")
	Enqueued    = attribute.Key("holdfast.enqueued")

	GenAIOperation    = attribute.Key("gen_ai.operation.name")
	GenAIProvider     = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel = attribute.Key("gen_ai.request.model")
	GenAIInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	ErrorType         = attribute.Key("error.type")
)

// Surfaces (holdfast.surface).
const (
	SurfaceSlack    = "slack"
	SurfaceConsole  = "console"
	SurfaceAPI      = "api"
	SurfaceCLI      = "cli"
	SurfaceSchedule = "schedule"
	SurfaceAgent    = "agent"
)

// SurfaceOf names the surface that asked, from the uid queue items and
// transcripts use ("slack:U1", "user:<id>", "key:<id>", "cli", "engine") and
// the session's origin: an agent session's API calls are the agent's.
func SurfaceOf(uid, origin string) string {
	switch {
	case origin == store.OriginAgent:
		return SurfaceAgent
	case strings.HasPrefix(uid, "slack:"):
		return SurfaceSlack
	case strings.HasPrefix(uid, "user:"):
		return SurfaceConsole
	case strings.HasPrefix(uid, "key:"):
		return SurfaceAPI
	case uid == "cli":
		return SurfaceCLI
	}
	return SurfaceSchedule
}

// Provenance is the run or turn span's provenance: the session's id,
// origin, platform and tags, the surface and the workflow command (when
// there is one).
func Provenance(s *store.Session, surface, command string) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, Surface.String(surface))
	if command != "" {
		kv = append(kv, WorkflowCommand.String(command))
	}
	if s != nil {
		kv = append(kv, SessionID.String(s.ID), SessionOrigin.String(s.Origin), SessionPlatform.String(s.Platform),
			SessionTags.StringSlice(s.Tags))
	}
	return kv
}

// Fail marks span failed with err (and its error kind, when known).
func Fail(span trace.Span, kind string, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	if kind != "" {
		span.SetAttributes(ErrorKind.String(kind))
	}
}

// Format writes sc as a W3C traceparent ("00-<trace id>-<span id>-<flags>"),
// or "" when sc is not valid.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	copy(b[:], "00-")
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// FromContext is the traceparent of ctx's span ("" when it has none).
func FromContext(ctx context.Context) string {
	return Format(trace.SpanContextFromContext(ctx))
}

// Parse reads a W3C traceparent written by Format (or any version-00
// traceparent), answering a remote span context.
func Parse(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	var flags [1]byte
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}

// Join answers ctx with traceparent as the parent of the spans started from
// it, so they join the trace it names; an empty or unreadable traceparent
// leaves ctx as it is.
func Join(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	sc, ok := Parse(traceparent)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// LogHandler wraps h so that a line logged with a context inside a span
// carries trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
