// Package fakellm is a local server speaking the OpenAI Chat Completions
// wire format, for tests of the engine and the binary: the openai provider
// talks to it exactly as it would to a hosted model.
package fakellm

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// Server answers POST /chat/completions. While blocked, every call waits
// until Unblock or until the caller goes away; otherwise it echoes the last
// user message (like the template model), so outputs are predictable.
type Server struct {
	*httptest.Server
	calls   atomic.Int64
	arrived chan struct{}
	gone    chan struct{}
	// Fail, when set to an HTTP status, makes every call answer that status
	// with an OpenAI-shaped error body.
	Fail atomic.Int32

	mu      sync.Mutex
	blocked chan struct{} // nil when answering
	script  func(n int, body map[string]any) map[string]any
	bodies  []map[string]any
}

// Script makes call n (1-based) answer the assistant message fn returns,
// e.g. {"role": "assistant", "content": nil, "tool_calls": [...]}, a nil
// one falling back to the echo; fn sees the request body as decoded JSON.
// It is how a test scripts a model that calls tools.
func (s *Server) Script(fn func(n int, body map[string]any) map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = fn
}

// Requests returns the request bodies received so far, in order.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.bodies...)
}

// New starts a server; blocked says whether calls block from the start.
func New(blocked bool) *Server {
	s := &Server{arrived: make(chan struct{}, 1<<16), gone: make(chan struct{}, 1<<16)}
	if blocked {
		s.blocked = make(chan struct{})
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Calls is how many requests arrived so far.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Arrived receives one value per request as it arrives.
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Gone receives one value per blocked call whose caller went away (the
// call was cancelled), as the server sees it: a test measuring how fast a
// cancel reaches a model call waits on it.
func (s *Server) Gone() <-chan struct{} { return s.gone }

// Unblock lets waiting and future calls answer.
func (s *Server) Unblock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocked != nil {
		close(s.blocked)
		s.blocked = nil
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	n := int(s.calls.Add(1))
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	script := s.script
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	if code := int(s.Fail.Load()); code != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": http.StatusText(code), "type": "fake_error", "param": nil, "code": nil}})
		return
	}
	s.mu.Lock()
	blocked := s.blocked
	s.mu.Unlock()
	if blocked != nil {
		select {
		case <-blocked:
		case <-r.Context().Done():
			select {
			case s.gone <- struct{}{}:
			default:
			}
			return
		}
	}
	var msg map[string]any
	if script != nil {
		msg = script(n, body)
	}
	finish := "stop"
	if msg == nil {
		out := ""
		for _, m := range req.Messages {
			if s, ok := m.Content.(string); ok && m.Role == "user" {
				out = s
			}
		}
		msg = map[string]any{"role": "assistant", "content": out, "refusal": nil}
	} else if msg["tool_calls"] != nil {
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
	})
}
