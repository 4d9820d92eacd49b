// Package fakeslack is a fake of the parts of Slack's Web API and Socket Mode
// the bridge uses, speaking their wire protocol on httptest. Unlike slacktest
// it records every call's form values, implements chat.update, issues unique
// "<sec>.<6 digits>" timestamps, and can be told to fail for a while.
package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Bot identity answered by auth.test.
const (
	BotUserID = "UBOT"
	BotID     = "BBOT"
	TeamID    = "T1"
	// ChannelGone is a channel chat.postMessage refuses with channel_not_found.
	ChannelGone = "CGONE"
)

// Call is one recorded Web API call.
type Call struct {
	Method string
	Form   map[string]string
	// TS is the ts answered (chat.postMessage, chat.update), or "".
	TS string
	// Status is the HTTP status answered; only 200 calls took effect.
	Status int
}

// Server is a fake Slack.
type Server struct {
	*httptest.Server
	t testing.TB

	mu        sync.Mutex
	calls     []Call
	lastMicro int64
	failures  []failure
	conns     []*wsConn
	acks      chan string
	connected chan struct{}
}

type wsConn struct {
	c  *websocket.Conn
	mu sync.Mutex // gorilla/websocket allows one writer at a time
}

func (w *wsConn) write(fn func(c *websocket.Conn) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fn(w.c)
}

type failure struct {
	status     int
	retryAfter int // seconds, for 429
}

// New starts a fake Slack; it stops with the test.
func New(t testing.TB) *Server {
	s := &Server{t: t, acks: make(chan string, 1024), connected: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.api)
	mux.HandleFunc("/ws", s.ws)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.c.Close()
		}
		s.mu.Unlock()
		s.Close()
	})
	return s
}

// APIURL is the base URL for slack.OptionAPIURL / SLACK_API_URL.
func (s *Server) APIURL() string { return s.URL + "/api/" }

// FailNext makes the next n write calls (chat.*) answer status; for 429 the
// answer carries Retry-After: retryAfter seconds.
func (s *Server) FailNext(n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, failure{status: status, retryAfter: retryAfter})
	}
}

// Recover drops any failures still queued by FailNext.
func (s *Server) Recover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = nil
}

// Calls returns the recorded calls of method ("" for all), in order.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Delivered returns the calls of method that took effect (answered 200).
func (s *Server) Delivered(method string) []Call {
	var out []Call
	for _, c := range s.Calls(method) {
		if c.Status == http.StatusOK {
			out = append(out, c)
		}
	}
	return out
}

// nextTS issues a unique, increasing ts.
func (s *Server) nextTS() string {
	now := time.Now().UnixMicro()
	if now <= s.lastMicro {
		now = s.lastMicro + 1
	}
	s.lastMicro = now
	return fmt.Sprintf("%d.%06d", now/1e6, now%1e6)
}

func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	form := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		// Some methods (apps.connections.open) post JSON instead of a form.
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err != io.EOF {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range body {
			form[k] = fmt.Sprint(v)
		}
	} else {
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range r.Form {
			form[k] = strings.Join(v, ",")
		}
	}

	s.mu.Lock()
	call := Call{Method: method, Form: form, Status: http.StatusOK}
	if strings.HasPrefix(method, "chat.") && len(s.failures) > 0 {
		f := s.failures[0]
		s.failures = s.failures[1:]
		call.Status = f.status
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		if f.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", fmt.Sprint(f.retryAfter))
		}
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(`<html>unavailable</html>`))
		return
	}
	var resp map[string]any
	switch method {
	case "auth.test":
		resp = map[string]any{"ok": true, "user_id": BotUserID, "bot_id": BotID, "team_id": TeamID, "user": "holdfast"}
	case "apps.connections.open":
		resp = map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.URL, "http") + "/ws"}
	case "chat.postMessage":
		if form["channel"] == ChannelGone {
			resp = map[string]any{"ok": false, "error": "channel_not_found"}
			break
		}
		call.TS = s.nextTS()
		resp = map[string]any{"ok": true, "channel": form["channel"], "ts": call.TS,
			"message": map[string]any{"text": form["text"], "ts": call.TS, "thread_ts": form["thread_ts"]}}
	case "chat.update":
		call.TS = form["ts"]
		if call.TS == "" {
			resp = map[string]any{"ok": false, "error": "message_not_found"}
		} else {
			resp = map[string]any{"ok": true, "channel": form["channel"], "ts": call.TS, "text": form["text"]}
		}
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": s.nextTS()}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// ws is Socket Mode's WebSocket: it greets with hello, pings so the client's
// dead-man timer stays quiet, and records each acknowledged envelope id.
func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	wc := &wsConn{c: c}
	s.mu.Lock()
	s.conns = append(s.conns, wc)
	s.mu.Unlock()
	if err := wc.write(func(c *websocket.Conn) error {
		return c.WriteJSON(map[string]any{"type": "hello", "num_connections": 1, "connection_info": map[string]any{"app_id": "A1"}})
	}); err != nil {
		return
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if wc.write(func(c *websocket.Conn) error {
				return c.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second))
			}) != nil {
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	s.connected <- struct{}{}
	for {
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if err := c.ReadJSON(&ack); err != nil {
			return
		}
		s.acks <- ack.EnvelopeID
	}
}

// Connected waits until a Socket Mode client has connected.
func (s *Server) Connected(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-s.connected:
	case <-time.After(timeout):
		t.Fatal("no Socket Mode connection")
	}
}

// SendEnvelope pushes a Socket Mode envelope to every connected client.
func (s *Server) SendEnvelope(envelopeID, typ string, payload json.RawMessage) error {
	s.mu.Lock()
	conns := append([]*wsConn(nil), s.conns...)
	s.mu.Unlock()
	for _, wc := range conns {
		if err := wc.write(func(c *websocket.Conn) error {
			return c.WriteJSON(map[string]any{"envelope_id": envelopeID, "type": typ, "payload": payload, "accepts_response_payload": false})
		}); err != nil {
			return err
		}
	}
	return nil
}

// Acks delivers acknowledged envelope ids as the client sends them.
func (s *Server) Acks() <-chan string { return s.acks }
