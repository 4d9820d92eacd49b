package bridge

import (
	"context"
	"fmt"
	"strings"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// EngineService adapts the workflow engine to what the bridge needs.
func EngineService(e *engine.Engine, st store.Store) Engine { return engineAdapter{e, st} }

type engineAdapter struct {
	e  *engine.Engine
	st store.Store
}

// Enqueue implements Engine.
func (a engineAdapter) Enqueue(ctx context.Context, p EnqueueParams) (string, bool, error) {
	it, created, err := a.e.Enqueue(ctx, engine.EnqueueParams{Command: p.Command, DedupeKey: p.DedupeKey,
		Payload: p.Payload, SessionID: p.SessionID, OwnerUID: p.OwnerUID})
	if err != nil {
		return "", false, err
	}
	return it.ID, created, nil
}

// Decide implements Engine.
func (a engineAdapter) Decide(ctx context.Context, p DecideParams) (*DecideResult, error) {
	h, err := a.e.Decide(ctx, engine.DecideParams{HoldID: p.HoldID, Decision: p.Decision, Comment: p.Comment,
		Decider: slackCaller(p.SlackUserID)})
	if err != nil {
		return nil, err
	}
	return &DecideResult{Status: h.Status, Approvals: len(h.Approvals), Required: h.RequiredApprovals}, nil
}

// OpenHolds implements Engine from the store's open holds of the session.
func (a engineAdapter) OpenHolds(ctx context.Context, sessionID string) ([]*store.Hold, error) {
	return a.st.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: sessionID, Limit: maxThreadHolds + 1})
}

// slackCaller is a Slack user as the engine and sessions runtime know them:
// the engine finds a linked console user itself, and the caller is recorded
// as "slack:<id>", which cards and threads show as a mention.
func slackCaller(user string) engine.Decider {
	return engine.Decider{SlackUserID: user, Via: "slack"}
}

// SessionsService adapts the sessions runtime to what the bridge needs.
func SessionsService(s *sessions.Service) Sessions { return sessionsAdapter{s} }

type sessionsAdapter struct{ s *sessions.Service }

// ResolveTag implements Sessions; the runtime classifies the slack: tag as
// a channel session.
func (a sessionsAdapter) ResolveTag(ctx context.Context, tag string, p NewSession) (*store.Session, error) {
	return a.s.ResolveTag(ctx, tag, sessions.CreateParams{Title: p.Title, Context: p.Context,
		Source: sessions.Source{Via: sessions.ViaSlack, UserID: actor(p.User)}})
}

// Message implements Sessions: the turn runs in the background, so the
// inbox worker never waits on a model.
func (a sessionsAdapter) Message(ctx context.Context, id, text, user string) error {
	_, err := a.s.Message(ctx, id, text, slackCaller(user), true)
	return err
}

// SetPolicy implements Sessions.
func (a sessionsAdapter) SetPolicy(ctx context.Context, id, policy, user string) error {
	_, err := a.s.SetPolicy(ctx, id, policy, slackCaller(user))
	return err
}

// Command implements Sessions, phrasing the runtime's result for a thread.
func (a sessionsAdapter) Command(ctx context.Context, id, command, user string) (string, error) {
	res, err := a.s.Command(ctx, id, command, slackCaller(user))
	if err != nil {
		return "", err
	}
	switch command {
	case sessions.CmdTerminate:
		var parts []string
		if res.CancelledTurn {
			parts = append(parts, "stopped the reply in progress")
		}
		if res.CancelledRuns > 0 {
			parts = append(parts, fmt.Sprintf("cancelled %d run(s)", res.CancelledRuns))
		}
		if len(parts) == 0 {
			return "Nothing was running in this thread.", nil
		}
		return ":octagonal_sign: Terminated: " + strings.Join(parts, " and ") + ".", nil
	case sessions.CmdCompact:
		if res.Summary != nil {
			if s, ok := res.Summary.Payload["text"].(string); ok && s != "" {
				return ":compression: Compacted. Summary so far:\n" + esc(s), nil
			}
		}
		return ":compression: Compacted.", nil
	}
	return statusLine(res.Session), nil
}

// statusLine is /status for a thread.
func statusLine(s *store.Session) string {
	if s == nil {
		return "No session."
	}
	line := fmt.Sprintf("*Status:* `%s`", esc(s.Status))
	if s.DoneReason != "" {
		line += " (" + esc(s.DoneReason) + ")"
	}
	line += fmt.Sprintf(" · *policy* `%s` · %d events", esc(s.Policy), s.EventCount)
	if s.ActiveRunID != "" {
		line += fmt.Sprintf(" · active `%s`", esc(s.ActiveRunID))
	}
	return line + fmt.Sprintf(" · session `%s`", esc(s.ID))
}
