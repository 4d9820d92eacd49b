package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAI talks to any OpenAI-compatible Chat Completions endpoint. Chat
// Completions (not Responses) is used because it is the API that compatible
// servers (vLLM, Ollama, proxies) actually implement.
type OpenAI struct {
	model  string
	client openai.Client
}

func newOpenAI(name string, cfg Config) *OpenAI {
	base := cfg.OpenAIBaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		// Our CompleteWithRetry owns the policy; SDK retries would multiply
		// attempts and hide them from the run's accounting.
		option.WithMaxRetries(0),
	}
	if cfg.OpenAIAPIKey != "" {
		// Left unset, the SDK falls back to OPENAI_API_KEY, and local
		// compatible servers often need no key at all.
		opts = append(opts, option.WithAPIKey(cfg.OpenAIAPIKey))
	}
	return &OpenAI{model: name, client: openai.NewClient(opts...)}
}

// Name implements Model; it returns the spec so logs and usage records say
// which provider produced the output.
func (o *OpenAI) Name() string { return "openai:" + o.model }

// Complete implements Model.
func (o *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	params, err := o.params(req)
	if err != nil {
		return Response{}, err
	}
	var httpRes *http.Response
	cc, err := o.client.Chat.Completions.New(ctx, params, option.WithResponseInto(&httpRes))
	if err != nil {
		return Response{}, o.classify(ctx, err, httpRes)
	}
	if len(cc.Choices) == 0 {
		return Response{}, fmt.Errorf("%s: response has no choices", o.Name())
	}
	msg := cc.Choices[0].Message
	out := Response{
		Content:   msg.Content,
		TokensIn:  int(cc.Usage.PromptTokens),
		TokensOut: int(cc.Usage.CompletionTokens),
	}
	for _, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue // custom tools are never offered, so never expected back
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out, nil
}

func (o *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(o.model)}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: tc.Name, Arguments: tc.Arguments,
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			return p, fmt.Errorf("%s: message %d has unknown role %q", o.Name(), i, m.Role)
		}
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if req.MaxTokens > 0 {
		// max_completion_tokens, not the deprecated max_tokens that OpenAI's
		// reasoning models reject.
		p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	return p, nil
}

// providerError keeps the SDK error reachable (errors.As *openai.Error) while
// adding what the retry policy needs: whether to retry and how long the server
// asked us to wait.
type providerError struct {
	name       string
	err        error
	transient  bool
	retryAfter time.Duration
	hasAfter   bool
}

func (e *providerError) Error() string {
	msg := fmt.Sprintf("%s: %v", e.name, e.err)
	var apiErr *openai.Error
	if errors.As(e.err, &apiErr) && apiErr.Message != "" {
		// The SDK's summary is only the status; the provider's message (for
		// example "model does not exist") is what a steward needs to fix the
		// workflow. OpenAI masks keys in it; we also bound its length.
		detail := apiErr.Message
		if len(detail) > 300 {
			detail = detail[:300] + "…"
		}
		msg += ": " + detail
	}
	if e.transient {
		msg += " (transient)"
	}
	return msg
}

func (e *providerError) Unwrap() []error {
	if e.transient {
		return []error{ErrTransient, e.err}
	}
	return []error{e.err}
}

// RetryAfter exposes the server's requested delay to CompleteWithRetry.
func (e *providerError) RetryAfter() (time.Duration, bool) { return e.retryAfter, e.hasAfter }

func (o *OpenAI) classify(ctx context.Context, err error, res *http.Response) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up; report that rather than whatever the transport
		// made of the torn-down connection, and never as transient.
		return fmt.Errorf("%s: %w", o.Name(), ctxErr)
	}
	pe := &providerError{name: o.Name(), err: err}
	status := 0
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		status = apiErr.StatusCode
		if apiErr.Response != nil {
			res = apiErr.Response
		}
	} else if res != nil && res.StatusCode >= 400 {
		// An error body that is not OpenAI-shaped JSON surfaces as a decode
		// error; the status code still tells us what happened.
		status = res.StatusCode
	}
	switch {
	case status != 0:
		pe.transient = status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
	default:
		pe.transient = isTransportError(err)
	}
	if res != nil {
		pe.retryAfter, pe.hasAfter = parseRetryAfter(res.Header, time.Now())
	}
	return pe
}

// isTransportError is true for failures of the connection rather than of the
// request: those are worth retrying, malformed responses are not.
func isTransportError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, context.DeadlineExceeded)
}

// parseRetryAfter reads retry-after-ms (OpenAI's finer-grained header) or
// Retry-After in either delta-seconds or HTTP-date form.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return max(0, time.Duration(s*float64(time.Second))), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}
