package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// recordingEngine records enqueues (idempotent by dedupe key) and refuses
// every decision from users outside stewards.
type recordingEngine struct {
	mu       sync.Mutex
	enqueues []engine.EnqueueParams
	keys     map[string]string
	decides  []engine.DecideParams
	stewards map[string]bool
	// failEnqueue fails that many Enqueue calls first, as a busy store would.
	failEnqueue int
	// gate, when set, holds every Enqueue of a brief containing "slow"
	// until it is closed.
	gate chan struct{}
	// entered counts Enqueue calls as they start (before the gate).
	entered atomic.Int64
}

func newRecordingEngine() *recordingEngine {
	return &recordingEngine{keys: map[string]string{}, stewards: map[string]bool{}}
}

func (e *recordingEngine) Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error) {
	e.entered.Add(1)
	if brief, _ := p.Payload["brief"].(string); e.gate != nil && strings.Contains(brief, "slow") {
		<-e.gate
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failEnqueue > 0 {
		e.failEnqueue--
		return nil, false, errors.New("database is locked")
	}
	if p.Command != "/draft-memo" {
		return nil, false, fmt.Errorf("workflow %s: %w", p.Command, store.ErrNotFound)
	}
	if id, ok := e.keys[p.DedupeKey]; ok {
		return &store.QueueItem{ID: id}, false, nil
	}
	id := fmt.Sprintf("itm_%d", len(e.keys)+1)
	e.keys[p.DedupeKey] = id
	e.enqueues = append(e.enqueues, p)
	return &store.QueueItem{ID: id}, true, nil
}

func (e *recordingEngine) Decide(ctx context.Context, p engine.DecideParams) (*store.Hold, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.decides = append(e.decides, p)
	if !e.stewards[p.Decider.SlackUserID] {
		return nil, store.Refuse(store.ErrForbidden, "%s is not a steward", p.Decider.SlackUserID)
	}
	if p.Decision == "approve" {
		return &store.Hold{ID: p.HoldID, Status: store.HoldApproved, RequiredApprovals: 1}, nil
	}
	return &store.Hold{ID: p.HoldID, Status: store.HoldRejected, RequiredApprovals: 1}, nil
}

func (e *recordingEngine) IsSteward(ctx context.Context, d engine.Decider) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stewards[d.SlackUserID], nil
}

func (e *recordingEngine) SlackStewards(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, ok := range e.stewards {
		if ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (e *recordingEngine) Subscribe(func(engine.Event)) {}

// Lead: a stand-in engine is the only process, so it always leads.
func (e *recordingEngine) Lead(ctx context.Context, fn func(ctx context.Context)) {
	fn(ctx)
	<-ctx.Done()
}

func (e *recordingEngine) snapshot() ([]engine.EnqueueParams, []engine.DecideParams) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.EnqueueParams(nil), e.enqueues...), append([]engine.DecideParams(nil), e.decides...)
}

// openHold stores a suspended run with an open hold in session sessionID,
// as the engine would leave it, and answers the hold's id.
func (tb *testBundle) openHold(t testing.TB, sessionID string) string {
	t.Helper()
	tb.addWorkflow(t, "/held", "live", "held")
	wf, err := tb.store.WorkflowGetByCommand(tb.ctx, "/held")
	require.NoError(t, err)
	it, _, err := tb.store.QueueItemInsert(tb.ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf.MemoID,
		Command: "/held", DedupeKey: "k", SessionID: sessionID})
	require.NoError(t, err)
	runs, err := tb.store.QueueItemClaim(tb.ctx, &store.QueueItemClaimParams{RunnerID: "test", Claims: []store.ItemClaim{{ItemID: it.ID}}})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	h, err := tb.store.RunSuspend(tb.ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: runs[0].ID, Lease: runs[0].Lease},
		Hold: &store.Hold{ID: store.HoldIDForRun(runs[0].ID), SessionID: sessionID, Command: "/held", Output: "out", RequiredApprovals: 1}})
	require.NoError(t, err)
	return h.ID
}
