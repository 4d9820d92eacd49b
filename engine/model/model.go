// Package model is the seam between the engine and whatever produces text:
// the engine talks to one small interface so workflows can switch between an
// offline deterministic provider (tests, demos, air-gapped installs) and any
// OpenAI-compatible endpoint without the engine knowing which it has.
package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Message roles. They mirror the Chat Completions vocabulary because that is
// the lowest common denominator every provider we target understands.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of a conversation. ToolCalls is set on assistant turns
// that asked for tools; ToolCallID ties a tool turn back to the call it answers,
// which providers require to accept the transcript.
type Message struct {
	Role       string // system|user|assistant|tool
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is a model's request to run a tool. Arguments stay raw JSON so the
// engine validates them against its own schema rather than trusting ours.
type ToolCall struct {
	ID, Name, Arguments string
}

// Tool describes a callable function to the model. Parameters is a JSON schema
// kept as a plain map so callers need not depend on any SDK type.
type Tool struct {
	Name, Description string
	Parameters        map[string]any
}

// Request is everything a provider needs for one completion. MaxTokens <= 0
// leaves the limit to the provider.
type Request struct {
	Messages  []Message
	Tools     []Tool
	MaxTokens int
}

// Response carries the output and token usage; usage is recorded per step for
// cost accounting, so providers report it even when it is an estimate.
type Response struct {
	Content             string
	ToolCalls           []ToolCall
	TokensIn, TokensOut int
}

// Model is a text provider. Implementations must be safe for concurrent use:
// the Registry hands one instance to every run that names the same spec.
type Model interface {
	Name() string
	Complete(ctx context.Context, req Request) (Response, error)
}

// ErrTransient marks failures worth retrying (rate limits, server errors,
// timeouts, dropped connections). Provider errors wrap it so the engine's
// retry policy can decide without knowing which provider failed.
var ErrTransient = errors.New("transient model error")

// IsTransient reports whether err is worth retrying. Cancellation by the
// caller is never transient, even when a provider wrapped it oddly, because
// retrying would ignore the caller's decision to stop.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, ErrTransient)
}

// Config holds provider settings that come from the environment rather than
// from a workflow, so a workflow can only choose a model, never a credential.
type Config struct {
	OpenAIBaseURL, OpenAIAPIKey string
	// HTTPClient lets tests and deployments inject transports (proxies,
	// timeouts); nil means http.DefaultClient.
	HTTPClient *http.Client
	// Tracer, when set, records every call the Registry's models make as a
	// span (see Traced).
	Tracer trace.TracerProvider
}

// DefaultOpenAIBaseURL is used when Config.OpenAIBaseURL is empty.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// New resolves a spec: "template" or "openai:<model>"; "" means defaultSpec.
// Specs come from user-authored workflow memos, so anything else is rejected
// with an error naming the accepted forms instead of guessing.
func New(spec, defaultSpec string, cfg Config) (Model, error) {
	resolved, err := resolveSpec(spec, defaultSpec)
	if err != nil {
		return nil, err
	}
	if resolved == "template" {
		return Template{}, nil
	}
	name, _ := strings.CutPrefix(resolved, "openai:")
	return newOpenAI(name, cfg), nil
}

// resolveSpec validates and normalises a spec so that the Registry keys on
// what will actually be built ("" and the default share one instance).
func resolveSpec(spec, defaultSpec string) (string, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		s = strings.TrimSpace(defaultSpec)
	}
	switch {
	case s == "":
		return "", errors.New(`model: empty spec and no default (want "template" or "openai:<model>")`)
	case s == "template":
		return s, nil
	case strings.HasPrefix(s, "openai:"):
		name := strings.TrimSpace(strings.TrimPrefix(s, "openai:"))
		if name == "" {
			return "", fmt.Errorf(`model: spec %q names no model (want "openai:<model>")`, s)
		}
		return "openai:" + name, nil
	default:
		return "", fmt.Errorf(`model: unknown spec %q (want "template" or "openai:<model>")`, s)
	}
}

// Registry caches providers by spec. Each workflow may name its own model, and
// building an SDK client per step would waste connections and allocations.
type Registry struct {
	defaultSpec string
	cfg         Config

	mu     sync.Mutex
	models map[string]Model
}

// NewRegistry returns an empty Registry; providers are built on first use so a
// misconfigured model only fails the workflows that use it.
func NewRegistry(defaultSpec string, cfg Config) *Registry {
	return &Registry{defaultSpec: defaultSpec, cfg: cfg, models: map[string]Model{}}
}

// Spec answers the spec a workflow's Model resolves to ("" is the
// default), as usage records it; a bad spec is answered as written.
func (r *Registry) Spec(spec string) string {
	key, err := resolveSpec(spec, r.defaultSpec)
	if err != nil {
		return spec
	}
	return key
}

// Get returns the cached provider for spec, building it on first use. Bad
// specs are not cached so a corrected memo takes effect immediately.
func (r *Registry) Get(spec string) (Model, error) {
	key, err := resolveSpec(spec, r.defaultSpec)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.models[key]; ok {
		return m, nil
	}
	m, err := New(key, "", r.cfg)
	if err != nil {
		return nil, err
	}
	m = Traced(m, r.cfg.Tracer)
	r.models[key] = m
	return m, nil
}
