package bridge

import (
	"context"
	"fmt"
	"strings"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// SessionsService adapts the sessions runtime to what the bridge needs.
func SessionsService(s *sessions.Service) Sessions { return sessionsAdapter{s} }

type sessionsAdapter struct{ s *sessions.Service }

func (a sessionsAdapter) ResolveTag(ctx context.Context, tag string, p NewSession) (*store.Session, error) {
	return a.s.ResolveTag(ctx, tag, sessions.CreateParams{Title: p.Title, Context: p.Context,
		Source: sessions.Source{Via: sessions.ViaSlack, UserID: p.Actor}})
}

func (a sessionsAdapter) Message(ctx context.Context, id, text, actor string) error {
	_, err := a.s.Message(ctx, id, text, actor, true)
	return err
}

func (a sessionsAdapter) SetPolicy(ctx context.Context, id, policy, actor string) error {
	_, err := a.s.SetPolicy(ctx, id, policy, actor)
	return err
}

func (a sessionsAdapter) Command(ctx context.Context, id, command, actor string) (string, error) {
	res, err := a.s.Command(ctx, id, command, actor)
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
