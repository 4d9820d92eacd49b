package model

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
)

// traced records each model call as a span with the OpenTelemetry GenAI
// semantic conventions (operation, provider, requested model, token usage).
// A call retried after a transient error is one span per attempt: each is a
// call the provider answered (or failed).
type traced struct {
	Model
	tracer            trace.Tracer
	name              string // span name: "<operation> <model>"
	provider, request string
}

// Traced wraps m so that each call is a span of tp's; a nil tp leaves m as
// it is, so an untraced service pays nothing per call.
func Traced(m Model, tp trace.TracerProvider) Model {
	if tp == nil {
		return m
	}
	provider, request := "holdfast.template", m.Name()
	if name, ok := strings.CutPrefix(m.Name(), "openai:"); ok {
		provider, request = "openai", name
	}
	return &traced{Model: m, tracer: tracing.Tracer(tp), name: "chat " + request, provider: provider, request: request}
}

func (t *traced) Complete(ctx context.Context, req Request) (Response, error) {
	ctx, span := t.tracer.Start(ctx, t.name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		tracing.GenAIOperation.String("chat"), tracing.GenAIProvider.String(t.provider),
		tracing.GenAIRequestModel.String(t.request)))
	defer span.End()
	resp, err := t.Model.Complete(ctx, req)
	if err != nil {
		kind := "model"
		if IsTransient(err) {
			kind = "model_transient"
		}
		span.SetAttributes(tracing.ErrorType.String(kind))
		tracing.Fail(span, "", err)
		return resp, err
	}
	span.SetAttributes(tracing.GenAIInputTokens.Int(resp.TokensIn), tracing.GenAIOutputTokens.Int(resp.TokensOut))
	return resp, nil
}
