package model

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
)

// fakeServer speaks the Chat Completions wire format. handle decides each
// reply; it gets the 1-based call number and the decoded request body.
type fakeServer struct {
	*httptest.Server
	calls atomic.Int32
}

func newFakeServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int, body map[string]any)) *fakeServer {
	t.Helper()
	fs := &fakeServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(fs.calls.Add(1))
		if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		handle(w, r, n, body)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fakeServer) model(t *testing.T, name string) Model {
	t.Helper()
	m, err := New("openai:"+name, "", Config{OpenAIBaseURL: fs.URL, OpenAIAPIKey: "sk-test", HTTPClient: fs.Client()})
	require.NoError(t, err)
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func completion(msg map[string]any, finish string, in, out int) map[string]any {
	return map[string]any{
		"id":      "chatcmpl-test",
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   "gpt-test",
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"finish_reason": finish,
			"logprobs":      nil,
		}},
		"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	}
}

func apiError(w http.ResponseWriter, status int, typ string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": typ, "type": typ, "param": nil, "code": nil}})
}

func okText(text string) func(http.ResponseWriter, *http.Request, int, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
		writeJSON(w, http.StatusOK, completion(map[string]any{"role": "assistant", "content": text}, "stop", 3, 2))
	}
}

var oneUser = Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}

func TestOpenAISuccessSendsTranscriptAndTools(t *testing.T) {
	t.Parallel()
	bodies := make(chan map[string]any, 1)
	var auth atomic.Value
	fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, _ int, body map[string]any) {
		auth.Store(r.Header.Get("Authorization"))
		bodies <- body
		writeJSON(w, http.StatusOK, completion(map[string]any{"role": "assistant", "content": "Here are the workflows."}, "stop", 42, 7))
	})
	m := fs.model(t, "gpt-test")
	require.Equal(t, "openai:gpt-test", m.Name())

	req := Request{
		Messages: []Message{
			{Role: RoleSystem, Content: "You are Holdfast."},
			{Role: RoleUser, Content: "what can you run?"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "list_workflows", Arguments: "{}"}}},
			{Role: RoleTool, Content: `[{"command":"/draft-memo"}]`, ToolCallID: "call_1"},
		},
		Tools: []Tool{
			{Name: "list_workflows", Description: "List live workflows", Parameters: map[string]any{"type": "object", "properties": map[string]any{}}},
			{Name: "enqueue_workflow", Description: "Enqueue a workflow", Parameters: map[string]any{
				"type":     "object",
				"required": []any{"command", "brief"},
				"properties": map[string]any{
					"command": map[string]any{"type": "string"},
					"brief":   map[string]any{"type": "string"},
				},
			}},
		},
		MaxTokens: 256,
	}
	resp, err := m.Complete(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, Response{Content: "Here are the workflows.", TokensIn: 42, TokensOut: 7}, resp)
	require.Equal(t, "Bearer sk-test", auth.Load())

	body := <-bodies
	require.Equal(t, "gpt-test", body["model"])
	require.EqualValues(t, 256, body["max_completion_tokens"])

	msgs, ok := body["messages"].([]any)
	require.True(t, ok)
	require.Len(t, msgs, 4)
	require.Equal(t, map[string]any{"role": "system", "content": "You are Holdfast."}, msgs[0])
	require.Equal(t, map[string]any{"role": "user", "content": "what can you run?"}, msgs[1])
	asst := msgs[2].(map[string]any)
	require.Equal(t, "assistant", asst["role"])
	require.Equal(t, []any{map[string]any{
		"id": "call_1", "type": "function",
		"function": map[string]any{"name": "list_workflows", "arguments": "{}"},
	}}, asst["tool_calls"])
	require.Equal(t, map[string]any{"role": "tool", "content": `[{"command":"/draft-memo"}]`, "tool_call_id": "call_1"}, msgs[3])

	tools, ok := body["tools"].([]any)
	require.True(t, ok)
	require.Len(t, tools, 2)
	first := tools[0].(map[string]any)
	require.Equal(t, "function", first["type"])
	fn := first["function"].(map[string]any)
	require.Equal(t, "list_workflows", fn["name"])
	require.Equal(t, "List live workflows", fn["description"])
	second := tools[1].(map[string]any)["function"].(map[string]any)
	require.Equal(t, "enqueue_workflow", second["name"])
	require.Equal(t, []any{"command", "brief"}, second["parameters"].(map[string]any)["required"])
}

func TestOpenAIToolCallResponse(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
		writeJSON(w, http.StatusOK, completion(map[string]any{
			"role":    "assistant",
			"content": nil,
			"tool_calls": []any{
				map[string]any{"id": "call_a", "type": "function", "function": map[string]any{"name": "list_workflows", "arguments": "{}"}},
				map[string]any{"id": "call_b", "type": "function", "function": map[string]any{"name": "enqueue_workflow", "arguments": `{"command":"/draft-memo","brief":"tides"}`}},
			},
		}, "tool_calls", 10, 5))
	})
	resp, err := fs.model(t, "gpt-test").Complete(context.Background(), oneUser)
	require.NoError(t, err)
	require.Empty(t, resp.Content)
	require.Equal(t, []ToolCall{
		{ID: "call_a", Name: "list_workflows", Arguments: "{}"},
		{ID: "call_b", Name: "enqueue_workflow", Arguments: `{"command":"/draft-memo","brief":"tides"}`},
	}, resp.ToolCalls)
	require.Equal(t, 10, resp.TokensIn)
	require.Equal(t, 5, resp.TokensOut)
}

func TestOpenAIRetryPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		handle        func(w http.ResponseWriter, r *http.Request, n int, body map[string]any)
		retries       int
		wantAttempts  int
		wantErr       bool
		wantTransient bool
		wantStatus    int
	}{
		{
			name: "429 with Retry-After 0 then success",
			handle: func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
				if n == 1 {
					w.Header().Set("Retry-After", "0")
					apiError(w, http.StatusTooManyRequests, "rate_limit_exceeded")
					return
				}
				okText("done")(w, r, n, body)
			},
			retries: 3, wantAttempts: 2,
		},
		{
			name: "500 every time exhausts retries",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
				apiError(w, http.StatusInternalServerError, "server_error")
			},
			retries: 2, wantAttempts: 3, wantErr: true, wantTransient: true, wantStatus: 500,
		},
		{
			name: "503 with a non-JSON body is still transient",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
				http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			},
			retries: 1, wantAttempts: 2, wantErr: true, wantTransient: true,
		},
		{
			name: "400 is permanent and not retried",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
				apiError(w, http.StatusBadRequest, "invalid_request_error")
			},
			retries: 3, wantAttempts: 1, wantErr: true, wantStatus: 400,
		},
		{
			name: "401 is permanent and not retried",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
				apiError(w, http.StatusUnauthorized, "invalid_api_key")
			},
			retries: 3, wantAttempts: 1, wantErr: true, wantStatus: 401,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, tc.handle)
			resp, attempts, err := CompleteWithRetry(context.Background(), fs.model(t, "gpt-test"), oneUser, tc.retries, time.Millisecond)
			require.Equal(t, tc.wantAttempts, attempts)
			require.EqualValues(t, tc.wantAttempts, fs.calls.Load(), "server saw a different number of requests: SDK retries must be off")
			if !tc.wantErr {
				require.NoError(t, err)
				require.Equal(t, "done", resp.Content)
				return
			}
			require.Error(t, err)
			require.Equal(t, tc.wantTransient, IsTransient(err))
			require.Equal(t, tc.wantTransient, errors.Is(err, ErrTransient))
			if tc.wantStatus != 0 {
				var apiErr *openai.Error
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, tc.wantStatus, apiErr.StatusCode)
			}
		})
	}
}

func TestOpenAIConnectionRefusedIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	m, err := New("openai:gpt-test", "", Config{OpenAIBaseURL: url, OpenAIAPIKey: "k"})
	require.NoError(t, err)
	_, attempts, err := CompleteWithRetry(context.Background(), m, oneUser, 1, time.Millisecond)
	require.Error(t, err)
	require.True(t, IsTransient(err), "%v", err)
	require.Equal(t, 2, attempts)
}

func TestOpenAICancelWhileServerBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		retry bool
	}{
		{name: "Complete"},
		{name: "CompleteWithRetry", retry: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			release := make(chan struct{})
			fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request, _ int, _ map[string]any) {
				close(started)
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
			t.Cleanup(func() { close(release) }) // runs before fs.Close, unblocking the handler
			m := fs.model(t, "gpt-test")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				if tc.retry {
					_, _, err := CompleteWithRetry(ctx, m, oneUser, 5, time.Millisecond)
					done <- err
					return
				}
				_, err := m.Complete(ctx, oneUser)
				done <- err
			}()
			<-started
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
				require.False(t, IsTransient(err))
			case <-time.After(5 * time.Second):
				t.Fatal("Complete did not return promptly after cancel")
			}
			require.EqualValues(t, 1, fs.calls.Load())
		})
	}
}

func TestCompleteWithRetryStopsDuringBackoff(t *testing.T) {
	t.Parallel()
	failed := make(chan struct{}, 1)
	fs := newFakeServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
		apiError(w, http.StatusInternalServerError, "server_error")
		failed <- struct{}{}
	})
	m := fs.model(t, "gpt-test")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		attempts int
		err      error
	}
	done := make(chan result, 1)
	go func() {
		// A one-hour base means the only way out of the wait is cancellation.
		_, n, err := CompleteWithRetry(ctx, m, oneUser, 5, time.Hour)
		done <- result{n, err}
	}()
	<-failed
	cancel()
	select {
	case r := <-done:
		require.ErrorIs(t, r.err, context.Canceled)
		require.Equal(t, 1, r.attempts)
	case <-time.After(5 * time.Second):
		t.Fatal("CompleteWithRetry kept waiting after cancel")
	}
}

func TestOpenAIErrorCarriesProviderMessage(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ map[string]any) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"message": "The model `gpt-nope` does not exist", "type": "invalid_request_error", "param": nil, "code": "model_not_found",
		}})
	})
	_, err := fs.model(t, "gpt-nope").Complete(context.Background(), oneUser)
	require.Error(t, err)
	require.False(t, IsTransient(err))
	require.Contains(t, err.Error(), "openai:gpt-nope")
	require.Contains(t, err.Error(), "does not exist")
}
