package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// The core commands, the same on every interface (seed 003). Interface
// specific commands stay in each interface.
const (
	CmdStatus    = "/status"
	CmdTerminate = "/terminate"
	CmdCompact   = "/compact"
)

// coreCommand recognises a message that is exactly a core command.
func coreCommand(text string) (string, bool) {
	switch c := strings.ToLower(strings.TrimSpace(text)); c {
	case CmdStatus, CmdTerminate, CmdCompact:
		return c, true
	}
	return "", false
}

// CommandResult answers Command. Session is the summary after the command.
type CommandResult struct {
	Command string         `json:"command"`
	Session *store.Session `json:"session"`
	// CancelledTurn reports whether /terminate stopped a running chat turn.
	CancelledTurn bool `json:"cancelledTurn"`
	// CancelledRuns counts workflow runs the engine cancelled.
	CancelledRuns int `json:"cancelledRuns"`
	// HeldOpen counts held runs /terminate left open: only a steward's
	// terminate rejects their holds.
	HeldOpen int `json:"heldOpen"`
	// Summary is /compact's compact_summary event.
	Summary *store.Event `json:"summary,omitempty"`
}

// Command runs a core command: /status answers the summary; /terminate
// cancels the active chat turn (its model call's context) and asks the
// engine to cancel the session's runs, recording who asked; /compact writes
// a compact_summary that later turns start from.
func (s *Service) Command(ctx context.Context, id, command string, by engine.Decider) (*CommandResult, error) {
	cmd, ok := coreCommand(command)
	if !ok {
		return nil, invalidf("unknown command %q (want /status, /terminate or /compact)", command)
	}
	switch cmd {
	case CmdTerminate:
		return s.terminate(ctx, id, by)
	case CmdCompact:
		return s.compact(ctx, id, by.UID())
	default:
		ses, err := s.st.SessionGetByID(ctx, id)
		if err != nil {
			return nil, err
		}
		return &CommandResult{Command: cmd, Session: ses}, nil
	}
}

func commandEvent(cmd, actor string) *store.EventAppendParams {
	return transcript.EncodePtr(transcript.Command{Command: cmd, By: actor}, actor)
}

// terminate stops the chat turn and the running runs for anyone who may
// write to the session; held runs are the engine's to reject (a steward's
// decision) or leave open.
func (s *Service) terminate(ctx context.Context, id string, by engine.Decider) (*CommandResult, error) {
	ses, err := s.st.SessionGetByID(ctx, id)
	if err != nil {
		return nil, err
	}
	actor := by.UID()
	s.mu.Lock()
	t := s.turns[id]
	s.mu.Unlock()
	upd := &store.SessionUpdateParams{ID: id, Events: []*store.EventAppendParams{commandEvent(CmdTerminate, actor)}}
	remote := ""
	switch {
	case t != nil:
	case s.alive(ses):
		remote = ses.ActiveRunID // another process is answering: ask it
	case ses.ActiveRunID != "":
		// A turn recorded by a process that is gone: clear it here.
		none, status, reason := "", store.SessionCancelled, terminated{actor}.Error()
		upd.ExpectActiveRunID, upd.ActiveRunID, upd.Status, upd.DoneReason = &ses.ActiveRunID, &none, &status, &reason
	}
	if _, _, err := s.st.SessionUpdate(ctx, upd); err != nil {
		return nil, err
	}
	res := &CommandResult{Command: CmdTerminate}
	switch {
	case t != nil:
		// A turn already writing its answer has finished: it is waited
		// for, not cancelled (its reply stands, and the session may read
		// done before the turn leaves s.turns).
		s.mu.Lock()
		settling := t.settling
		s.mu.Unlock()
		if !settling {
			t.cancel(terminated{actor})
		}
		select {
		case <-t.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		res.CancelledTurn = !settling
	case remote != "":
		if res.CancelledTurn, err = s.cancelRemote(ctx, id, remote, actor); err != nil {
			return nil, err
		}
	}
	if s.eng != nil {
		c, err := s.eng.CancelSessionRuns(ctx, id, by)
		if err != nil {
			return nil, fmt.Errorf("terminate session %s: cancel runs: %w", id, err)
		}
		res.CancelledRuns, res.HeldOpen = c.Runs, c.HeldOpen
	}
	if res.CancelledRuns > 0 && !res.CancelledTurn {
		// Runs, not a turn, were stopped: the session says so as a
		// cancelled turn would, unless a turn has started meanwhile.
		none, status, reason := "", store.SessionCancelled, terminated{actor}.Error()
		_, _, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, ExpectActiveRunID: &none, Status: &status, DoneReason: &reason})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
	}
	s.log.InfoContext(ctx, "session terminated", slog.String("session_id", id), slog.String("actor", actor),
		slog.Bool("cancelled_turn", res.CancelledTurn), slog.Int("cancelled_runs", res.CancelledRuns), slog.Int("held_open", res.HeldOpen))
	if res.Session, err = s.st.SessionGetByID(ctx, id); err != nil {
		return nil, err
	}
	return res, nil
}

// cancelRemote asks the process running turn turnID to cancel it (a
// durable request its heartbeat reads, and a notice that reaches it at
// once) and waits, a few heartbeats at most, for the turn to settle. The
// settle writes no event to wake on, so the wait reads the session with a
// growing pause: a few milliseconds while the notice is answered, at most
// a tenth of a heartbeat once the other process seems slow.
func (s *Service) cancelRemote(ctx context.Context, id, turnID, actor string) (bool, error) {
	if err := s.st.SessionTurnCancel(ctx, id, turnID, actor); errors.Is(err, store.ErrConflict) {
		return false, nil // it finished meanwhile
	} else if err != nil {
		return false, err
	}
	deadline := time.Now().Add(3 * s.cfg.TurnHeartbeat)
	pause := 2 * time.Millisecond
	for {
		ses, err := s.st.SessionGetByID(ctx, id)
		if err != nil {
			return false, err
		}
		if ses.ActiveRunID != turnID {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil // requested; it settles with its next heartbeat
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, max(s.cfg.TurnHeartbeat/10, 2*time.Millisecond))
	}
}

// compactEvents bounds what one /compact reads.
const compactEvents = 500

func (s *Service) compact(ctx context.Context, id, actor string) (*CommandResult, error) {
	evs, prev, err := s.sinceCompact(ctx, id, compactEvents)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		if _, err := s.st.SessionGetByID(ctx, id); err != nil {
			return nil, err
		}
	}
	text := s.summarise(ctx, id, evs, prev)
	summary := transcript.CompactSummary{Text: text, EventCount: len(evs)}
	if len(evs) > 0 {
		summary.ThroughEventID = evs[len(evs)-1].ID
	}
	ses, out, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, Events: []*store.EventAppendParams{
		commandEvent(CmdCompact, actor), transcript.EncodePtr(summary, "holdfast"),
	}})
	if err != nil {
		return nil, err
	}
	return &CommandResult{Command: CmdCompact, Session: ses, Summary: out[1]}, nil
}

// summarise asks an OpenAI-compatible model for the summary; the template
// model (which only echoes) and a failing model get a deterministic digest,
// so /compact always succeeds.
func (s *Service) summarise(ctx context.Context, id string, evs []*store.Event, prev string) string {
	digest := digest(evs, prev)
	m, err := s.cfg.Models.Get(s.cfg.DefaultModel)
	if err != nil || m.Name() == "template" || len(evs) == 0 {
		return digest
	}
	msgs, err := s.history(ctx, id)
	if err != nil {
		return digest
	}
	msgs = append(msgs, model.Message{Role: model.RoleUser, Content: "Summarise this conversation so far in at most five sentences, " +
		"keeping requests, decisions, queued workflows and their outcomes. Reply with the summary only."})
	resp, _, err := model.CompleteWithRetry(ctx, m, model.Request{Messages: msgs}, s.cfg.Retries, 0)
	if err != nil || strings.TrimSpace(resp.Content) == "" {
		s.log.WarnContext(ctx, "compact: model summary failed, using a digest", slog.String("session_id", id), slog.Any("error", err))
		return digest
	}
	return strings.TrimSpace(resp.Content)
}

func digest(evs []*store.Event, prev string) string {
	counts := map[string]int{}
	lastAsk := ""
	for _, e := range evs {
		counts[e.Type]++
		if text, _, ok, _ := transcript.MessageOf(e); ok && e.Type == transcript.TypeUserMessage {
			lastAsk = text // a wrongly typed text reads as none
		}
	}
	var b strings.Builder
	if prev != "" {
		b.WriteString(prev + " Since then: ")
	}
	fmt.Fprintf(&b, "%s: %s, %s, %s, %s.", engine.Count(len(evs), "event", "events"),
		engine.Count(counts[transcript.TypeUserMessage], "user message", "user messages"),
		engine.Count(counts[transcript.TypeAssistantMessage], "reply", "replies"),
		engine.Count(counts[transcript.TypeToolResult], "tool call", "tool calls"),
		engine.Count(counts[transcript.TypeRunFinished], "run finished", "runs finished"))
	if lastAsk != "" {
		fmt.Fprintf(&b, " Last request: %q.", truncate(lastAsk, 200))
	}
	return b.String()
}
