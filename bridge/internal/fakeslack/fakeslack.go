// Package fakeslack is a fake of the parts of Slack's Web API and Socket Mode
// the bridge uses, speaking their wire protocol on httptest. Unlike slacktest
// it records every call's form values, implements chat.update, issues unique
// "<sec>.<6 digits>" timestamps, and can be told to fail for a while.
//
// It keeps the views opened (views.open) and each user's published App
// Home (views.publish), answers chat.getPermalink and users.info (users
// added with AddUser), and auth.test with the workspace URL.
//
// It also keeps the messages posted, with their message metadata, and
// answers conversations.replies and conversations.history from them as
// Slack does (paged, oldest/latest bounds, metadata only with
// include_all_metadata), and it can answer chat.postMessage slowly: the
// message is in the channel before the answer leaves, which is the window
// in which a crash leaves a posted message unrecorded (SPEC §5).
package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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
	// At is when the call arrived.
	At time.Time
}

// Server is a fake Slack.
type Server struct {
	*httptest.Server
	t testing.TB

	mu        sync.Mutex
	changed   chan struct{} // closed, and replaced, after every call: Wait's signal
	calls     []Call
	lastMicro int64
	failures  []failure
	conns     []*wsConn
	acks      chan string
	connected chan struct{}

	// messages holds every message in every channel, in ts order.
	messages  map[string][]*Message
	postDelay time.Duration
	inFlight  int

	threads     threads                    // threads.go
	views       []View                     // opened, in order
	ackPayloads map[string]json.RawMessage // Socket Mode acks' payloads by envelope id
	homes       map[string]json.RawMessage // each user's latest App Home
	viewID      int
}

// View is a view opened with views.open.
type View struct {
	TriggerID string
	ID        string
	// View is the view as the bridge sent it (Slack's JSON).
	View json.RawMessage
}

// User is a workspace member as users.info answers.
type User struct {
	ID, Name, RealName, DisplayName string
}

// WorkspaceURL is the workspace URL auth.test answers.
const WorkspaceURL = "https://holdfast-test.slack.test/"

// Message is a message as the fake keeps it.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string // "" for a top-level message
	User     string
	BotID    string
	Text     string
	Blocks   json.RawMessage
	// Metadata is the message metadata as posted ({event_type,
	// event_payload}), or nil.
	Metadata map[string]any
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
	s := &Server{t: t, changed: make(chan struct{}), acks: make(chan string, 1024), connected: make(chan struct{}, 16), messages: map[string][]*Message{},
		homes: map[string]json.RawMessage{}, ackPayloads: map[string]json.RawMessage{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.api)
	mux.HandleFunc("/ws", s.ws)
	mux.HandleFunc("/commands/", s.respond)
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

// Changed is closed when the next Web API call after it has been answered
// (or, for a slow post, has posted its message), so a test can wait on
// what Slack sees instead of polling it.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Server) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) signal() {
	s.mu.Lock()
	s.signalLocked()
	s.mu.Unlock()
}

// APIURL is the base URL for slack.OptionAPIURL / SLACK_API_URL.
func (s *Server) APIURL() string { return s.URL + "/api/" }

// ResponseURL is a slash command's response_url, answered as Slack's
// hooks answer it; what is posted there is recorded as a call of method
// "response_url", its JSON fields as the form (path holds the URL's path).
func (s *Server) ResponseURL(name string) string { return s.URL + "/commands/" + name }

// respond answers a post to a response_url: 200 "ok" for a message with
// text, 400 "no_text" otherwise, as Slack does.
func (s *Server) respond(w http.ResponseWriter, r *http.Request) {
	defer s.signal()
	var body map[string]any
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	form := map[string]string{"path": r.URL.Path}
	for k, v := range body {
		form[k] = fmt.Sprint(v)
	}
	call := Call{Method: "response_url", Form: form, Status: http.StatusOK, At: time.Now()}
	if form["text"] == "" {
		call.Status = http.StatusBadRequest
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	w.WriteHeader(call.Status)
	if call.Status != http.StatusOK {
		_, _ = w.Write([]byte("no_text"))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// FailNext makes the next n write calls (chat.*) answer status; for 429 the
// answer carries Retry-After: retryAfter seconds.
func (s *Server) FailNext(n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, failure{status: status, retryAfter: retryAfter})
	}
}

// SlowPosts makes chat.postMessage take d to answer. The message is in its
// channel at once; only the answer (and so the ts) is late, as when a
// process dies waiting for it.
func (s *Server) SlowPosts(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.postDelay = d
}

// InFlight is how many chat.postMessage calls have posted their message and
// not answered yet.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// AddMessage puts a message into a channel as someone other than the bot
// would post it (a thread's root, say).
func (s *Server) AddMessage(channel, ts, threadTS, user, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addMessage(&Message{Channel: channel, TS: ts, ThreadTS: threadTS, User: user, Text: text})
}

// Messages returns the messages of channel ("" for all channels), oldest
// first (by channel, then ts).
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var chans []string
	for c := range s.messages {
		if channel == "" || c == channel {
			chans = append(chans, c)
		}
	}
	slices.Sort(chans)
	var out []Message
	for _, c := range chans {
		for _, m := range s.messages[c] {
			out = append(out, *m)
		}
	}
	return out
}

func (s *Server) addMessage(m *Message) {
	ms := append(s.messages[m.Channel], m)
	slices.SortStableFunc(ms, func(a, b *Message) int { return compareTS(a.TS, b.TS) })
	s.messages[m.Channel] = ms
}

func (s *Server) message(channel, ts string) *Message {
	for _, m := range s.messages[channel] {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

// compareTS orders Slack timestamps ("<seconds>.<micros>") numerically.
func compareTS(a, b string) int {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	ai, _ := strconv.ParseInt(as, 10, 64)
	bi, _ := strconv.ParseInt(bs, 10, 64)
	if ai != bi {
		return int(ai - bi)
	}
	return strings.Compare(af+strings.Repeat("0", 6-min(len(af), 6)), bf+strings.Repeat("0", 6-min(len(bf), 6)))
}

// AddUser makes users.info know u (SetUser, with a User).
func (s *Server) AddUser(u User) { s.SetUser(u.ID, u.Name, u.DisplayName, u.RealName) }

// Views returns the views opened so far, in order.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]View(nil), s.views...)
}

// Home returns the App Home last published for user (nil: none).
func (s *Server) Home(user string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.homes[user]
}

// Permalink is the link chat.getPermalink answers for a message.
func Permalink(channel, ts string) string {
	return WorkspaceURL + "archives/" + channel + "/p" + strings.Replace(ts, ".", "", 1)
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
	defer s.signal()
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
			switch v.(type) {
			case map[string]any, []any:
				b, _ := json.Marshal(v) // a view: kept as the JSON it came as
				form[k] = string(b)
			default:
				form[k] = fmt.Sprint(v)
			}
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
	call := Call{Method: method, Form: form, Status: http.StatusOK, At: time.Now()}
	if s.intercept(w, r, call, form) {
		return
	}
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
		resp = map[string]any{"ok": true, "user_id": BotUserID, "bot_id": BotID, "team_id": TeamID, "user": "holdfast", "url": WorkspaceURL}
	case "apps.connections.open":
		resp = map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.URL, "http") + "/ws"}
	case "chat.postMessage":
		if form["channel"] == ChannelGone {
			resp = map[string]any{"ok": false, "error": "channel_not_found"}
			break
		}
		call.TS = s.nextTS()
		m := &Message{Channel: form["channel"], TS: call.TS, ThreadTS: form["thread_ts"], User: BotUserID, BotID: BotID,
			Text: form["text"], Blocks: json.RawMessage(form["blocks"])}
		if md := form["metadata"]; md != "" {
			if err := json.Unmarshal([]byte(md), &m.Metadata); err != nil {
				resp = map[string]any{"ok": false, "error": "invalid_metadata_format"}
				break
			}
		}
		s.addMessage(m)
		resp = map[string]any{"ok": true, "channel": m.Channel, "ts": call.TS, "message": wire(m, true)}
		if d := s.postDelay; d > 0 {
			s.calls = append(s.calls, call)
			s.inFlight++
			s.signalLocked()
			s.mu.Unlock()
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done(): // the caller went away (killed): nobody hears the answer
			}
			t.Stop()
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
			return
		}
	case "chat.update":
		call.TS = form["ts"]
		m := s.message(form["channel"], call.TS)
		if m == nil {
			resp = map[string]any{"ok": false, "error": "message_not_found"}
		} else {
			m.Text = form["text"]
			if form["blocks"] != "" {
				m.Blocks = json.RawMessage(form["blocks"])
			}
			resp = map[string]any{"ok": true, "channel": form["channel"], "ts": call.TS, "text": form["text"]}
		}
	case "conversations.replies":
		resp = s.replies(form)
	case "conversations.history":
		resp = s.history(form)
	case "users.info":
		resp = s.userInfo(form)
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": s.nextTS()}
	case "views.open":
		resp = s.openView(form)
	case "views.publish":
		resp = s.publishView(form)
	case "chat.getPermalink":
		if form["channel"] == "" || form["message_ts"] == "" {
			resp = map[string]any{"ok": false, "error": "invalid_arguments"}
			break
		}
		resp = map[string]any{"ok": true, "channel": form["channel"], "permalink": Permalink(form["channel"], form["message_ts"])}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// ExpiredTrigger is a trigger id views.open answers as Slack answers one
// used after its 3 seconds.
const ExpiredTrigger = "trig-expired"

// openView answers views.open as Slack does: the view with its new id.
func (s *Server) openView(form map[string]string) map[string]any {
	var view map[string]any
	switch form["trigger_id"] {
	case "":
		return map[string]any{"ok": false, "error": "invalid_trigger_id"}
	case ExpiredTrigger:
		return map[string]any{"ok": false, "error": "expired_trigger_id"}
	}
	if err := json.Unmarshal([]byte(form["view"]), &view); err != nil || view["type"] != "modal" {
		return map[string]any{"ok": false, "error": "invalid_arguments"}
	}
	s.viewID++
	id := fmt.Sprintf("V%06d", s.viewID)
	s.views = append(s.views, View{TriggerID: form["trigger_id"], ID: id, View: json.RawMessage(form["view"])})
	view["id"] = id
	return map[string]any{"ok": true, "view": view}
}

// publishView answers views.publish: the user's Home is the view.
func (s *Server) publishView(form map[string]string) map[string]any {
	var view map[string]any
	if form["user_id"] == "" {
		return map[string]any{"ok": false, "error": "invalid_arguments"}
	}
	if err := json.Unmarshal([]byte(form["view"]), &view); err != nil || view["type"] != "home" {
		return map[string]any{"ok": false, "error": "invalid_arguments"}
	}
	s.homes[form["user_id"]] = json.RawMessage(form["view"])
	s.viewID++
	view["id"] = fmt.Sprintf("V%06d", s.viewID)
	return map[string]any{"ok": true, "view": view}
}

// wire is a message in Slack's JSON (slack-go's Msg field names); metadata
// only when asked for, as include_all_metadata does.
func wire(m *Message, withMetadata bool) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "text": m.Text}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
	}
	if m.User != "" {
		out["user"] = m.User
	}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
		out["app_id"] = "A1"
	}
	if len(m.Blocks) > 0 && json.Valid(m.Blocks) {
		out["blocks"] = m.Blocks
	}
	if withMetadata && m.Metadata != nil {
		out["metadata"] = m.Metadata
	}
	return out
}

func truthy(v string) bool { return v == "1" || v == "true" }

// page applies conversations.*'s oldest/latest/inclusive bounds, then its
// cursor and limit, to msgs (already in answer order).
func page(form map[string]string, msgs []*Message, defaultLimit int) map[string]any {
	oldest, latest, inclusive := form["oldest"], form["latest"], truthy(form["inclusive"])
	var kept []*Message
	for _, m := range msgs {
		if oldest != "" {
			if c := compareTS(m.TS, oldest); c < 0 || c == 0 && !inclusive {
				continue
			}
		}
		if latest != "" {
			if c := compareTS(m.TS, latest); c > 0 || c == 0 && !inclusive {
				continue
			}
		}
		kept = append(kept, m)
	}
	off := 0
	if c := form["cursor"]; c != "" {
		off, _ = strconv.Atoi(strings.TrimPrefix(c, "off:"))
	}
	limit := defaultLimit
	if l, err := strconv.Atoi(form["limit"]); err == nil && l > 0 {
		limit = min(l, 1000)
	}
	off = min(off, len(kept))
	end := min(off+limit, len(kept))
	out := []map[string]any{}
	for _, m := range kept[off:end] {
		out = append(out, wire(m, truthy(form["include_all_metadata"])))
	}
	next := ""
	if end < len(kept) {
		next = fmt.Sprint("off:", end)
	}
	return map[string]any{"ok": true, "messages": out, "has_more": next != "",
		"response_metadata": map[string]any{"next_cursor": next}}
}

// replies answers conversations.replies: the thread's root, then its
// replies, oldest first. A root posted outside the fake is unknown to it;
// its replies are answered alone.
func (s *Server) replies(form map[string]string) map[string]any {
	ch, ts := form["channel"], form["ts"]
	if ts == "" {
		return map[string]any{"ok": false, "error": "invalid_arguments"}
	}
	if m := s.message(ch, ts); m != nil && m.ThreadTS != "" && m.ThreadTS != ts {
		ts = m.ThreadTS // a reply's ts answers its whole thread
	}
	var thread []*Message
	for _, m := range s.messages[ch] {
		if m.TS == ts || m.ThreadTS == ts {
			thread = append(thread, m)
		}
	}
	if len(thread) == 0 {
		return map[string]any{"ok": false, "error": "thread_not_found"}
	}
	return page(form, thread, 1000)
}

// history answers conversations.history: the channel's top-level
// messages, newest first.
func (s *Server) history(form map[string]string) map[string]any {
	var top []*Message
	ms := s.messages[form["channel"]]
	for i := len(ms) - 1; i >= 0; i-- {
		if m := ms[i]; m.ThreadTS == "" || m.ThreadTS == m.TS {
			top = append(top, m)
		}
	}
	return page(form, top, 100)
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
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if err := c.ReadJSON(&ack); err != nil {
			return
		}
		s.mu.Lock()
		s.ackPayloads[ack.EnvelopeID] = ack.Payload
		s.mu.Unlock()
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

// AckPayload is the payload a Socket Mode ack carried (a slash command's
// answer), or nil.
func (s *Server) AckPayload(envelopeID string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackPayloads[envelopeID]
}

// Acks delivers acknowledged envelope ids as the client sends them.
func (s *Server) Acks() <-chan string { return s.acks }
