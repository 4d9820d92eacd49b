package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// Decider is who decides a hold, as the calling surface knows them.
type Decider struct {
	UserID      string
	Username    string
	Role        string
	SlackUserID string
	KeyID       string
}

// DecideParams is one decision attempt.
type DecideParams struct {
	HoldID   string
	Decision string // approve|reject
	Comment  string
	// Output, when set on an approval, is an edited output dispatched in
	// place of the run's own (both are kept).
	Output  string
	Decider Decider
	Via     string // slack|console|api
}

// Decide applies a steward's decision. Refusals wrap ErrForbidden; a hold
// already decided wraps store.ErrConflict naming who decided. Every attempt
// is audited. An approval that completes the hold wakes the runner, which
// resumes the run from the decision recorded on it.
func (e *Engine) Decide(ctx context.Context, p DecideParams) (*store.Hold, error) {
	if p.Decision != "approve" && p.Decision != "reject" {
		return nil, fmt.Errorf("%w: decision must be approve or reject, got %q", ErrInvalid, p.Decision)
	}
	h, err := e.store.HoldGetByID(ctx, p.HoldID)
	if err != nil {
		return nil, err
	}
	d := p.Decider
	// A console user's linked Slack id and a Slack user's linked console
	// account are the same person, for stewardship and for self-approval.
	var linked *store.User
	if d.UserID != "" {
		if u, err := e.store.UserGetByID(ctx, d.UserID); err == nil {
			linked = u
			if d.SlackUserID == "" {
				d.SlackUserID = u.SlackUserID
			}
			if d.Username == "" {
				d.Username = u.Username
			}
		}
	} else if d.SlackUserID != "" {
		if u, err := e.store.UserGetBySlackID(ctx, d.SlackUserID); err == nil {
			linked = u
			d.UserID = u.ID
		}
	}
	name := deciderName(d)
	refuse := func(reason string) (*store.Hold, error) {
		audit := &store.HoldDecision{HoldID: h.ID, RunID: h.RunID, Decision: p.Decision, DecidedBy: name, Via: p.Via,
			Comment: p.Comment, Outcome: store.AttemptRefused, Reason: reason}
		if p.Output != "" {
			audit.Output = &p.Output
		}
		if err := e.store.HoldDecisionAppend(ctx, audit); err != nil {
			return nil, err
		}
		e.log.InfoContext(ctx, "hold decision refused", slog.String("hold_id", h.ID), slog.String("by", name), slog.String("reason", reason))
		return nil, fmt.Errorf("%w: %s", ErrForbidden, reason)
	}
	if !e.isSteward(d, linked) {
		return refuse(name + " is not a steward; only stewards may decide holds")
	}
	if p.Decision == "approve" && !h.SelfApproval && isOwner(h.OwnerUID, d) {
		return refuse(name + " asked for this run and may not approve it (the workflow's Policy does not allow self approval)")
	}
	return e.decide(ctx, h, &store.HoldDecideParams{HoldID: h.ID, Decision: p.Decision, DecidedBy: name,
		DeciderKey: deciderKey(d), Via: p.Via, Comment: p.Comment, Output: nonEmpty(p.Output)})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *Engine) decide(ctx context.Context, h *store.Hold, p *store.HoldDecideParams) (*store.Hold, error) {
	p.Now = e.cfg.Now()
	p.Events = func(h *store.Hold, r *store.Run) []store.EventAppendParams {
		if h.Status == store.HoldOpen {
			approvals := make([]any, 0, len(h.Approvals))
			for _, a := range h.Approvals {
				approvals = append(approvals, map[string]any{"by": a.By, "via": a.Via})
			}
			return []store.EventAppendParams{{Type: EventHoldApprovedPartial, Actor: "engine", Payload: map[string]any{
				"holdId": h.ID, "runId": h.RunID, "approvals": approvals, "required": h.RequiredApprovals}}}
		}
		evs := []store.EventAppendParams{{Type: EventHoldDecided, Actor: "engine", Payload: map[string]any{
			"holdId": h.ID, "runId": h.RunID, "status": h.Status, "decidedBy": h.DecidedBy,
			"decidedVia": h.DecidedVia, "comment": h.Comment}}}
		if r.Settled() {
			evs = append(evs, finishedEvent(r))
		}
		return evs
	}
	out, err := e.store.HoldDecide(ctx, p)
	if err != nil {
		return out, err
	}
	if out.Status == store.HoldOpen {
		e.notify(Event{Kind: EventHoldApprovedPartial, RunID: out.RunID, HoldID: out.ID, ItemID: out.ItemID, SessionID: out.SessionID, Status: out.Status})
	} else {
		e.notify(Event{Kind: EventHoldDecided, RunID: out.RunID, HoldID: out.ID, ItemID: out.ItemID, SessionID: out.SessionID, Status: out.Status})
		if out.Status == store.HoldApproved {
			e.resumeHint.Store(true)
			e.signal()
		} else {
			e.notify(Event{Kind: EventRunFinished, RunID: out.RunID, ItemID: out.ItemID, SessionID: out.SessionID, Status: store.RunCancelled})
		}
		e.log.InfoContext(ctx, "hold decided", slog.String("hold_id", out.ID), slog.String("run_id", out.RunID),
			slog.String("status", out.Status), slog.String("by", out.DecidedBy), slog.String("via", out.DecidedVia))
	}
	return out, nil
}

func (e *Engine) isSteward(d Decider, linked *store.User) bool {
	if store.CanDecide(d.Role) {
		return true
	}
	if linked != nil && store.CanDecide(linked.Role) {
		return true
	}
	return d.SlackUserID != "" && slices.Contains(e.cfg.SlackStewards, d.SlackUserID)
}

// isOwner compares the item's owner ("slack:U1", "user:<id>", "key:<id>")
// with every identity the decider is known by.
func isOwner(owner string, d Decider) bool {
	switch {
	case owner == "":
		return false
	case d.SlackUserID != "" && owner == "slack:"+d.SlackUserID:
		return true
	case d.UserID != "" && owner == "user:"+d.UserID:
		return true
	case d.KeyID != "" && owner == "key:"+d.KeyID:
		return true
	}
	return false
}

func deciderName(d Decider) string {
	switch {
	case d.Username != "":
		return d.Username
	case d.SlackUserID != "":
		return "slack:" + d.SlackUserID
	case d.KeyID != "":
		return "key:" + d.KeyID
	case d.UserID != "":
		return "user:" + d.UserID
	}
	return "unknown"
}

// deciderKey identifies a person for "N distinct stewards".
func deciderKey(d Decider) string {
	switch {
	case d.UserID != "":
		return "user:" + d.UserID
	case d.SlackUserID != "":
		return "slack:" + d.SlackUserID
	case d.KeyID != "":
		return "key:" + d.KeyID
	}
	return "name:" + d.Username
}

// expireHolds decides open holds past their Hold timeout per On timeout.
func (e *Engine) expireHolds(ctx context.Context) (int, error) {
	hs, err := e.store.HoldListExpired(ctx, e.cfg.Now(), 50)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hs {
		decision := "reject"
		if h.OnTimeout == workflow.OnTimeoutApprove {
			decision = "approve"
		}
		_, err := e.decide(ctx, h, &store.HoldDecideParams{HoldID: h.ID, Decision: decision, DecidedBy: "engine",
			DeciderKey: "engine", Via: "timeout", Comment: "hold timed out", Force: true})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return n, err
		}
		n++
	}
	return n, nil
}

// CancelSessionRuns cancels a session's in-flight runs (their model calls'
// contexts are cancelled and they settle `cancelled`) and its suspended runs.
func (e *Engine) CancelSessionRuns(ctx context.Context, sessionID, by string) (int, error) {
	running, err := e.store.RunList(ctx, &store.RunListParams{SessionID: sessionID, Status: store.RunRunning, Limit: 500})
	if err != nil {
		return 0, err
	}
	n := 0
	cause := fmt.Errorf("%w by %s", errRunCancelled, by)
	e.mu.Lock()
	for _, r := range running {
		if cancel := e.inflight[r.ID]; cancel != nil {
			cancel(cause)
		} else {
			// Claimed here (or elsewhere) but not started: cancelled when
			// it starts on this process. Another replica's runs are not
			// reached (single-replica today).
			e.cancelReq[r.ID] = cause
		}
		n++
	}
	e.mu.Unlock()
	cancelled, err := e.store.RunCancelSuspended(ctx, &store.RunCancelParams{SessionID: sessionID, By: by, Now: e.cfg.Now(),
		Events: func(r *store.Run) []store.EventAppendParams { return []store.EventAppendParams{finishedEvent(r)} }})
	if err != nil {
		return n, err
	}
	for _, r := range cancelled {
		e.notify(Event{Kind: EventRunFinished, RunID: r.ID, ItemID: r.ItemID, SessionID: r.SessionID, Status: r.Status})
	}
	return n + len(cancelled), nil
}

// ErrInvalid marks a request the caller must fix (a 400).
var ErrInvalid = errors.New("invalid")
