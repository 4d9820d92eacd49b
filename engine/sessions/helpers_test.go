package sessions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

type bundle struct {
	db  store.Store
	svc *sessions.Service
	eng *recordingEngine
}

type setupOpts struct {
	modelSpec string
	openaiURL string
	client    *http.Client
	noEngine  bool
	timeout   time.Duration
	turnStale time.Duration
	tracer    trace.TracerProvider
}

func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	db := testdb.Open(t)
	if o.modelSpec == "" {
		o.modelSpec = "template"
	}
	reg := model.NewRegistry(o.modelSpec, model.Config{OpenAIBaseURL: o.openaiURL, OpenAIAPIKey: "sk-test", HTTPClient: o.client, Tracer: o.tracer})
	b := &bundle{db: db, eng: &recordingEngine{}}
	var eng sessions.Engine = b.eng
	if o.noEngine {
		eng = nil
	}
	b.svc = sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: reg, DefaultModel: o.modelSpec, TurnTimeout: o.timeout,
		TurnStale: o.turnStale, Tracer: o.tracer}, eng,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		b.svc.Close()
	})
	return b
}

// liveWorkflow indexes a live workflow memo so turns can list and enqueue it.
func (b *bundle) liveWorkflow(t *testing.T, command, summary string) {
	t.Helper()
	_, err := b.db.MemoCreate(context.Background(), &store.MemoCreateParams{Title: "WF " + command, Body: "x", MemoType: store.MemoTypeWorkflow,
		Workflow: &store.WorkflowIndex{Command: command, Status: "live", Summary: summary}})
	require.NoError(t, err)
}

func (b *bundle) events(t *testing.T, id string) []*store.Event {
	t.Helper()
	evs, err := b.svc.Events(context.Background(), id, timeZero, 1000)
	require.NoError(t, err)
	return evs
}

func types(evs []*store.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// recordingEngine stands in for the workflow engine (package engine) until
// it lands: it records what sessions asked of it and answers like it.
type recordingEngine struct {
	mu        sync.Mutex
	enqueued  []engine.EnqueueParams
	cancelled []string // "sessionID by"
}

func (e *recordingEngine) Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.Command == "/missing" {
		return nil, false, fmt.Errorf("workflow %s: %w", p.Command, store.ErrNotFound)
	}
	for i, q := range e.enqueued {
		if q.Command == p.Command && q.DedupeKey == p.DedupeKey {
			return &store.QueueItem{ID: fmt.Sprintf("itm_%d", i+1)}, false, nil
		}
	}
	e.enqueued = append(e.enqueued, p)
	return &store.QueueItem{ID: fmt.Sprintf("itm_%d", len(e.enqueued))}, true, nil
}

func (e *recordingEngine) CancelSessionRuns(ctx context.Context, sessionID string, by engine.Decider) (engine.Cancelled, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelled = append(e.cancelled, sessionID+" "+by.UID())
	return engine.Cancelled{Runs: 1}, nil
}

func (e *recordingEngine) IsSteward(_ context.Context, by engine.Decider) (bool, error) {
	return store.CanDecide(by.Role), nil
}

// user is a console steward acting through the API.
func user(id string) engine.Decider {
	return engine.Decider{UserID: id, Role: store.RoleSteward, Via: "api"}
}

func (e *recordingEngine) snapshot() ([]engine.EnqueueParams, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.EnqueueParams(nil), e.enqueued...), append([]string(nil), e.cancelled...)
}

// chatServer speaks the Chat Completions wire format; handle answers call n
// (1-based) given the decoded request body.
type chatServer struct {
	*httptest.Server
	calls atomic.Int32
	mu    sync.Mutex
	reqs  []map[string]any
}

func newChatServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int, body map[string]any)) *chatServer {
	t.Helper()
	cs := &chatServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cs.mu.Lock()
		cs.reqs = append(cs.reqs, body)
		cs.mu.Unlock()
		handle(w, r, int(cs.calls.Add(1)), body)
	}))
	t.Cleanup(cs.Close)
	return cs
}

func (cs *chatServer) requests() []map[string]any {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]map[string]any(nil), cs.reqs...)
}

func completion(w http.ResponseWriter, msg map[string]any) {
	finish := "stop"
	if msg["tool_calls"] != nil {
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1700000000, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
}

func toolCall(id, name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(b)}}
}

func answer(text string) map[string]any {
	return map[string]any{"role": "assistant", "content": text}
}

func toolsAnswer(calls ...map[string]any) map[string]any {
	cs := []any{}
	for _, c := range calls {
		cs = append(cs, c)
	}
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": cs}
}
