package fakeslack

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// threads is what the fake keeps for reading threads as a bot that joins
// them late does: users answered by users.info, per-method failures and
// rate limits (Slack limits conversations.replies for non-Marketplace apps
// to as little as 1 call a minute, 15 messages a page), and page caps.
type threads struct {
	users    map[string]user
	failures map[string][]failure
	limits   map[string]*rateLimit
	pageCaps map[string]int
	delays   map[string]time.Duration
	stalls   map[string]*stall // by method + " " + channel
}

type stall struct {
	arrived, release chan struct{}
	arrive           func()
}

type user struct{ name, displayName, realName string }

// rateLimit answers at most calls calls of a method per window; the rest
// get 429 with Retry-After the seconds left in the window (at least 1).
type rateLimit struct {
	calls  int
	window time.Duration
	start  time.Time
	used   int
}

// SetUser makes users.info answer id with these names (profile
// display_name and real_name; name is the handle).
func (s *Server) SetUser(id, name, displayName, realName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.users == nil {
		s.threads.users = map[string]user{}
	}
	s.threads.users[id] = user{name: name, displayName: displayName, realName: realName}
}

// FailMethod makes the next n calls of method answer status; for 429 the
// answer carries Retry-After: retryAfter seconds.
func (s *Server) FailMethod(method string, n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.failures == nil {
		s.threads.failures = map[string][]failure{}
	}
	for range n {
		s.threads.failures[method] = append(s.threads.failures[method], failure{status: status, retryAfter: retryAfter})
	}
}

// Delay makes every call of method wait d (or until its caller gives up)
// before it is answered.
func (s *Server) Delay(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.delays == nil {
		s.threads.delays = map[string]time.Duration{}
	}
	s.threads.delays[method] = d
}

// Stall makes calls of method for channel wait, unanswered, until release
// is called (or their caller gives up): a Slack that hangs on one channel.
// arrived is closed when the first such call is waiting.
func (s *Server) Stall(method, channel string) (arrived <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.stalls == nil {
		s.threads.stalls = map[string]*stall{}
	}
	st := &stall{arrived: make(chan struct{}), release: make(chan struct{})}
	st.arrive = sync.OnceFunc(func() { close(st.arrived) })
	s.threads.stalls[method+" "+channel] = st
	return st.arrived, sync.OnceFunc(func() { close(st.release) })
}

// ClearFailures drops the failures FailMethod still holds for method.
func (s *Server) ClearFailures(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.threads.failures, method)
}

// RateLimit lets calls calls of method through per window and answers the
// others 429 with Retry-After, as Slack's per-method limits do.
func (s *Server) RateLimit(method string, calls int, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.limits == nil {
		s.threads.limits = map[string]*rateLimit{}
	}
	s.threads.limits[method] = &rateLimit{calls: calls, window: window}
}

// CapPages makes method answer at most n messages a page whatever limit
// the caller asks for (Slack's 15 for non-Marketplace apps).
func (s *Server) CapPages(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads.pageCaps == nil {
		s.threads.pageCaps = map[string]int{}
	}
	s.threads.pageCaps[method] = n
}

// Seed puts a message into its channel as if posted while the bot was not
// listening: no event is delivered for it. Use it for a thread's earlier
// messages, the bot's own included (User BotUserID, BotID BotID).
func (s *Server) Seed(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addMessage(&m)
}

// intercept holds a call (Stall, Delay), and answers one refused by
// FailMethod or RateLimit (it records the call, unlocks s.mu and writes the
// answer) and reports whether it did; otherwise it applies CapPages to form
// and leaves s.mu locked.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request, call Call, form map[string]string) bool {
	if st := s.threads.stalls[call.Method+" "+form["channel"]]; st != nil {
		s.mu.Unlock()
		st.arrive()
		select {
		case <-st.release:
		case <-r.Context().Done():
		}
		s.mu.Lock()
	}
	if d := s.threads.delays[call.Method]; d > 0 {
		s.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		s.mu.Lock()
	}
	status, retryAfter := 0, 0
	if fs := s.threads.failures[call.Method]; len(fs) > 0 {
		status, retryAfter = fs[0].status, fs[0].retryAfter
		s.threads.failures[call.Method] = fs[1:]
	} else if l := s.threads.limits[call.Method]; l != nil {
		now := time.Now()
		if now.Sub(l.start) >= l.window {
			l.start, l.used = now, 0
		}
		if l.used >= l.calls {
			status = http.StatusTooManyRequests
			retryAfter = max(1, int(math.Ceil((l.window - now.Sub(l.start)).Seconds())))
		} else {
			l.used++
		}
	}
	if status == 0 {
		if n := s.threads.pageCaps[call.Method]; n > 0 {
			if l, err := strconv.Atoi(form["limit"]); err != nil || l <= 0 || l > n {
				form["limit"] = strconv.Itoa(n)
			}
		}
		return false
	}
	call.Status = status
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<html>unavailable</html>`))
	return true
}

// userInfo answers users.info.
func (s *Server) userInfo(form map[string]string) map[string]any {
	u, ok := s.threads.users[form["user"]]
	if !ok {
		return map[string]any{"ok": false, "error": "user_not_found"}
	}
	return map[string]any{"ok": true, "user": map[string]any{"id": form["user"], "team_id": TeamID, "name": u.name, "real_name": u.realName,
		"profile": map[string]any{"display_name": u.displayName, "real_name": u.realName}}}
}
