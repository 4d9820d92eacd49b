package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/store"
)

// recordingEngine records enqueues (idempotent by dedupe key) and refuses
// every decision from users outside stewards.
type recordingEngine struct {
	mu       sync.Mutex
	enqueues []bridge.EnqueueParams
	keys     map[string]string
	decides  []bridge.DecideParams
	stewards map[string]bool
	open     map[string]string // session → hold
	// failEnqueue fails that many Enqueue calls first, as a busy store would.
	failEnqueue int
	// gate, when set, holds every Enqueue of a brief containing "slow"
	// until it is closed.
	gate chan struct{}
}

func newRecordingEngine() *recordingEngine {
	return &recordingEngine{keys: map[string]string{}, stewards: map[string]bool{}, open: map[string]string{}}
}

func (e *recordingEngine) Enqueue(ctx context.Context, p bridge.EnqueueParams) (string, bool, error) {
	if brief, _ := p.Payload["brief"].(string); e.gate != nil && strings.Contains(brief, "slow") {
		<-e.gate
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failEnqueue > 0 {
		e.failEnqueue--
		return "", false, errors.New("database is locked")
	}
	if p.Command != "/draft-memo" {
		return "", false, fmt.Errorf("workflow %s: %w", p.Command, store.ErrNotFound)
	}
	if id, ok := e.keys[p.DedupeKey]; ok {
		return id, false, nil
	}
	id := fmt.Sprintf("itm_%d", len(e.keys)+1)
	e.keys[p.DedupeKey] = id
	e.enqueues = append(e.enqueues, p)
	return id, true, nil
}

func (e *recordingEngine) Decide(ctx context.Context, p bridge.DecideParams) (*bridge.DecideResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.decides = append(e.decides, p)
	if !e.stewards[p.SlackUserID] {
		return nil, store.Refuse(store.ErrForbidden, "%s is not a steward", p.SlackUserID)
	}
	if p.Decision == "approve" {
		return &bridge.DecideResult{Status: store.HoldApproved, Approvals: 1, Required: 1}, nil
	}
	return &bridge.DecideResult{Status: store.HoldRejected, Required: 1}, nil
}

func (e *recordingEngine) OpenHolds(ctx context.Context, sessionID string) ([]*store.Hold, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h, ok := e.open[sessionID]; ok {
		return []*store.Hold{{ID: h, SessionID: sessionID}}, nil
	}
	return nil, nil
}

func (e *recordingEngine) snapshot() ([]bridge.EnqueueParams, []bridge.DecideParams) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]bridge.EnqueueParams(nil), e.enqueues...), append([]bridge.DecideParams(nil), e.decides...)
}
