package sessions

import (
	"context"

	"github.com/holdfast-bot/holdfast/engine"
)

// EngineOf adapts the workflow engine to the Engine interface the runtime
// needs, so every caller wires the same thing.
func EngineOf(e *engine.Engine) Engine { return engineAdapter{e} }

type engineAdapter struct{ e *engine.Engine }

func (a engineAdapter) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	it, created, err := a.e.Enqueue(ctx, engine.EnqueueParams{Command: p.Command, DedupeKey: p.DedupeKey,
		Payload: p.Payload, SessionID: p.SessionID, OwnerUID: p.OwnerUID})
	if err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{ItemID: it.ID, Enqueued: created}, nil
}

func (a engineAdapter) CancelSessionRuns(ctx context.Context, sessionID string, by engine.Decider) (int, error) {
	return a.e.CancelSessionRuns(ctx, sessionID, by)
}

func (a engineAdapter) AuthorizeCancel(ctx context.Context, sessionID string, by engine.Decider) error {
	return a.e.AuthorizeCancel(ctx, sessionID, by)
}

func (a engineAdapter) IsSteward(ctx context.Context, by engine.Decider) (bool, error) {
	return a.e.IsSteward(ctx, by)
}
