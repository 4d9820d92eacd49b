package bridge

import "sync"

// TestSignals is told each time the bridge finishes a unit of work — a
// delivery handled, a mirror, outbox or backfill pass — so a test can wait
// on the work instead of polling the store for its effects (River's test
// signals). A bridge without them (Config.Signals nil) pays a nil check.
type TestSignals struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewTestSignals returns signals for Config.Signals.
func NewTestSignals() *TestSignals { return &TestSignals{ch: make(chan struct{})} }

// Changed is closed when the next unit of work after the call finishes.
func (s *TestSignals) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *TestSignals) fire() {
	if s == nil {
		return
	}
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}
