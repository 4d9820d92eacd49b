package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Decider is who asks the engine to decide or cancel something, as the
// calling surface knows them, and the surface they act through.
type Decider struct {
	UserID      string
	Username    string
	Role        string
	SlackUserID string
	KeyID       string
	Via         string // slack|console|api
	// DisplayName is how a transcript names the caller (a Slack user's
	// display name); empty: Username.
	DisplayName string
}

// UID names the caller as queue items and transcripts do ("slack:U1",
// "user:<id>", "key:<id>"), so ownership checks compare like with like.
func (d Decider) UID() string {
	switch {
	case d.SlackUserID != "" && d.UserID == "" && d.KeyID == "":
		return "slack:" + d.SlackUserID
	case d.UserID != "":
		return "user:" + d.UserID
	case d.KeyID != "":
		return "key:" + d.KeyID
	}
	return ""
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
}

// Decide applies a steward's decision. Refusals wrap store.ErrForbidden; a
// hold already decided (or already approved by this steward) wraps
// store.ErrConflict naming who decided, and so does an edited output that
// fails one of the workflow's Guard checks. Every attempt is audited. An
// approval that completes the hold wakes the runner, which resumes the run
// from the decision recorded on it. The rules are Rights' (MayDecide shows
// them before anyone clicks).
func (e *Engine) Decide(ctx context.Context, p DecideParams) (*store.Hold, error) {
	if p.Decision != "approve" && p.Decision != "reject" {
		return nil, store.Refuse(store.ErrInvalid, `decision must be "approve" or "reject", got %q`, p.Decision)
	}
	if err := store.CheckText("comment", p.Comment, store.MaxCommentChars); err != nil {
		return nil, err
	}
	if err := store.CheckMemoBody("the edited output", p.Output); err != nil {
		return nil, err // published, it would be a memo body
	}
	h, err := e.store.HoldGetByID(ctx, p.HoldID)
	if err != nil {
		return nil, err
	}
	if p.Output = strings.ReplaceAll(p.Output, "\r\n", "\n"); strings.TrimSpace(p.Output) == strings.TrimSpace(h.Output) {
		p.Output = "" // the output came back unchanged (an edit box sent as it was): not an edit
	}
	if p.Output != "" && strings.TrimSpace(p.Output) == "" {
		// Published, it would be an empty memo; memos refuse a blank body.
		return nil, store.Refuse(store.ErrInvalid, "the edited output is blank; to approve the output as it is, send none")
	}
	if p.Output != "" && p.Decision != "approve" {
		return nil, store.Refuse(store.ErrInvalid, "an edited output can only come with an approval")
	}
	rights, err := e.RightsOf(ctx, p.Decider)
	if err != nil {
		return nil, err
	}
	d := rights.d
	refuse := func(kind error, outcome, reason string) (*store.Hold, error) {
		audit := &store.HoldDecision{HoldID: h.ID, RunID: h.RunID, Decision: p.Decision, DecidedBy: rights.name, Via: d.Via,
			Comment: p.Comment, Outcome: outcome, Reason: reason}
		if p.Output != "" {
			audit.Output = &p.Output
		}
		if err := e.store.HoldDecisionAppend(ctx, audit); err != nil {
			return nil, err
		}
		e.log.InfoContext(ctx, "hold decision refused", slog.String("hold_id", h.ID), slog.String("by", rights.name), slog.String("reason", reason))
		return nil, store.Refuse(kind, "%s", reason)
	}
	if reason, kind := rights.refusal(h, p.Decision, false); kind != nil {
		outcome := store.AttemptRefused
		if errors.Is(kind, store.ErrConflict) {
			outcome = store.AttemptConflict
		}
		return refuse(kind, outcome, reason)
	}
	if p.Decision == "approve" && p.Output != "" && h.Status == store.HoldOpen {
		outcomes, err := e.GuardOutput(ctx, h.RunID, p.Output)
		if err != nil {
			return nil, err
		}
		for _, o := range outcomes {
			if !o.Passed {
				// 409 as SPEC §4.3 has it, yet a refused attempt, not
				// a conflict: the hold is open and this steward may
				// decide it, only not with this text.
				return refuse(store.ErrConflict, store.AttemptRefused,
					fmt.Sprintf("the edited output fails the Guard check %s: %s", o.Check, o.Detail))
			}
		}
	}
	return e.decide(ctx, h, attempt{decision: p.Decision, by: rights.name, key: deciderKey(d), via: d.Via,
		comment: p.Comment, output: nonEmpty(p.Output)})
}

// Rights is what one caller may do with holds, resolved once (their linked
// identity, their stewardship) so that a page of holds is checked without a
// lookup per hold. Decide refuses by the same rules, so what a surface shows
// before a click and what Decide answers after it never disagree.
type Rights struct {
	d       Decider
	name    string
	steward bool
}

// RightsOf resolves d's rights over holds.
func (e *Engine) RightsOf(ctx context.Context, d Decider) (*Rights, error) {
	d, linked, err := e.resolve(ctx, d)
	if err != nil {
		return nil, err
	}
	return &Rights{d: d, name: deciderName(d), steward: e.isSteward(d, linked)}, nil
}

// Steward says whether the caller may decide holds at all.
func (r *Rights) Steward() bool { return r.steward }

// MayApprove answers whether the caller may approve h now and, when not,
// the sentence saying why (the one Decide would refuse with).
func (r *Rights) MayApprove(h *store.Hold) (bool, string) {
	reason, kind := r.refusal(h, "approve", true)
	return kind == nil, reason
}

// MayReject is MayApprove for a rejection.
func (r *Rights) MayReject(h *store.Hold) (bool, string) {
	reason, kind := r.refusal(h, "reject", true)
	return kind == nil, reason
}

// refusal is the decision rule: the sentence and kind (the sentinel that
// picks the status) of a refusal, or a nil kind.
// A hold that is no longer open is refused here only when asked (checkOpen):
// Decide leaves that to the store, which decides it atomically and audits
// the conflict naming who decided.
func (r *Rights) refusal(h *store.Hold, decision string, checkOpen bool) (reason string, kind error) {
	if !r.steward {
		return r.name + " is not a steward; only stewards may decide holds", store.ErrForbidden
	}
	if checkOpen && h.Status != store.HoldOpen {
		by := ""
		if h.DecidedBy != "" {
			by = " by " + h.DecidedBy
		}
		return "this hold was already " + h.Status + by, store.ErrConflict
	}
	if decision != "approve" {
		return "", nil
	}
	if !h.SelfApproval && isOwner(h.OwnerUID, r.d) {
		return r.name + " asked for this run and may not approve it (the workflow's Policy does not allow self approval); another steward must approve it", store.ErrForbidden
	}
	if h.Status == store.HoldOpen && approvedBy(h, deciderKey(r.d)) {
		return alreadyApproved(h), store.ErrConflict
	}
	return "", nil
}

// approvedBy reports whether the person key has approved h already: N
// approvals are N people.
func approvedBy(h *store.Hold, key string) bool {
	return slices.ContainsFunc(h.Approvals, func(a store.HoldApproval) bool { return a.Key == key })
}

// alreadyApproved is said to the steward who approves twice (SPEC §4.3:
// "you already approved; N of M"), on every surface alike.
func alreadyApproved(h *store.Hold) string {
	return fmt.Sprintf("you already approved this hold (%d of %d approvals); it needs another steward's approval",
		len(h.Approvals), h.RequiredApprovals)
}

// MayDecide answers whether d may approve the hold now and, when not, why:
// the rule Decide applies, asked before anyone clicks (a surface shows no
// enabled Approve and gives the reason). Any steward who may approve may
// reject; Rights answers both for many holds at once.
func (e *Engine) MayDecide(ctx context.Context, holdID string, d Decider) (ok bool, reason string, err error) {
	h, err := e.store.HoldGetByID(ctx, holdID)
	if err != nil {
		return false, "", err
	}
	r, err := e.RightsOf(ctx, d)
	if err != nil {
		return false, "", err
	}
	ok, reason = r.MayApprove(h)
	return ok, reason, nil
}

// GuardOutput runs the Guard checks of the run's workflow (as compiled for
// the run) against text: what an edited output must pass before it may be
// published. A run without Guard steps checks nothing.
func (e *Engine) GuardOutput(ctx context.Context, runID, text string) ([]workflow.GuardOutcome, error) {
	run, err := e.store.RunGetByID(ctx, runID)
	if err != nil {
		return nil, err
	}
	var m workflow.Manifest
	if len(run.Manifest) == 0 || string(run.Manifest) == "null" {
		return nil, nil
	}
	if err := json.Unmarshal(run.Manifest, &m); err != nil {
		return nil, fmt.Errorf("run %s manifest: %w", runID, err)
	}
	var out []workflow.GuardOutcome
	for _, st := range m.Steps {
		if st.Kind == workflow.KindGuard {
			out = append(out, st.Guard.Check(text)...)
		}
	}
	return out, nil
}

// attempt is one decision on its way to the store.
type attempt struct {
	decision, by, key, via, comment string
	output                          *string
	force                           bool // hold timeouts: decides whatever the count
}

// resolve completes d with its linked identity: a console user's linked
// Slack id and a Slack user's linked console account are the same person,
// for stewardship and for self-approval.
func (e *Engine) resolve(ctx context.Context, d Decider) (Decider, *store.User, error) {
	var (
		u   *store.User
		err error
	)
	switch {
	case d.UserID != "":
		u, err = e.store.UserGetByID(ctx, d.UserID)
	case d.SlackUserID != "":
		u, err = e.store.UserGetBySlackID(ctx, d.SlackUserID)
	default:
		return d, nil, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return d, nil, nil
	}
	if err != nil {
		return d, nil, fmt.Errorf("resolve decider: %w", err)
	}
	if u.Disabled {
		// A disabled account lends no one its role or its name.
		return d, nil, nil
	}
	d.UserID = u.ID
	if d.SlackUserID == "" {
		d.SlackUserID = u.SlackUserID
	}
	if d.Username == "" {
		d.Username = u.Username
	}
	return d, u, nil
}

// IsSteward answers whether d may decide holds and make a session hold
// less (SPEC §3, §4.3): a steward or admin role, a console steward's linked
// Slack account, or a Slack user listed in SLACK_STEWARDS.
func (e *Engine) IsSteward(ctx context.Context, d Decider) (bool, error) {
	d, linked, err := e.resolve(ctx, d)
	if err != nil {
		return false, err
	}
	return e.isSteward(d, linked), nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// decide applies an attempt: the rules (one approval per person, N
// approvals decide, a rejection cancels the run) are here; the store writes
// the result as a compare-and-set on the hold as read, so two deciders at
// once cannot both count. On a lost race the hold is read again.
func (e *Engine) decide(ctx context.Context, h *store.Hold, a attempt) (*store.Hold, error) {
	for tries := 0; ; tries++ {
		p, conflict := e.decision(h, a)
		if conflict != "" {
			audit := p.Audit
			audit.Outcome, audit.Reason = store.AttemptConflict, conflict
			if err := e.store.HoldDecisionAppend(ctx, &audit); err != nil {
				return nil, err
			}
			return h, store.Refuse(store.ErrConflict, "%s", conflict)
		}
		out, err := e.store.HoldDecide(ctx, p)
		if errors.Is(err, store.ErrConflict) && tries < 10 {
			if h, err = e.store.HoldGetByID(ctx, h.ID); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		e.decided(ctx, out)
		return out, nil
	}
}

// decision computes what attempt a does to hold h: the store params, or
// the reason it changes nothing.
func (e *Engine) decision(h *store.Hold, a attempt) (*store.HoldDecideParams, string) {
	now := e.cfg.Now()
	p := &store.HoldDecideParams{HoldID: h.ID, ExpectApprovals: len(h.Approvals), Status: h.Status, DecidedBy: a.by,
		DecidedVia: a.via, Comment: a.comment, EditedOutput: h.EditedOutput, Now: now,
		Approvals: slices.Clone(h.Approvals),
		Audit: store.HoldDecision{HoldID: h.ID, RunID: h.RunID, Decision: a.decision, DecidedBy: a.by, Via: a.via,
			Comment: a.comment, Output: a.output, Outcome: store.AttemptAccepted}}
	if h.Status != store.HoldOpen {
		// Said to the person whose decision came too late, on the hold
		// they were deciding: who and when, as people read it.
		when := ""
		if h.DecidedAt != nil {
			when = h.DecidedAt.UTC().Format(" on 2 Jan 2006 at 15:04 UTC")
		}
		return p, fmt.Sprintf("this hold was already %s by %s via %s%s", h.Status, h.DecidedBy, h.DecidedVia, when)
	}
	if a.output != nil {
		p.EditedOutput = a.output
	}
	if a.decision == "reject" {
		msg := "rejected by " + a.by
		if a.comment != "" {
			msg += ": " + a.comment
		}
		p.Status, p.RunDecision = store.HoldRejected, "rejected"
		p.Outcome = &store.RunOutcome{Status: store.RunCancelled, ItemStatus: store.ItemFailed, ErrorKind: KindCancelled, Error: msg}
	} else {
		if !a.force && approvedBy(h, a.key) {
			return p, alreadyApproved(h) // a race Rights could not see
		}
		p.Approvals = append(p.Approvals, store.HoldApproval{By: a.by, Key: a.key, Via: a.via, At: now.UTC(), Comment: a.comment,
			Edited: a.output != nil})
		if a.force || len(p.Approvals) >= h.RequiredApprovals {
			p.Status, p.RunDecision = store.HoldApproved, "approved"
		} else {
			p.Audit.Reason = fmt.Sprintf("approval %d of %d", len(p.Approvals), h.RequiredApprovals)
		}
	}
	switch p.Status {
	case store.HoldOpen:
		approvals := make([]transcript.Approval, 0, len(p.Approvals))
		for _, x := range p.Approvals {
			approvals = append(approvals, transcript.Approval{By: x.By, Via: x.Via})
		}
		p.Events = []store.EventAppendParams{transcript.Encode(transcript.HoldApprovedPartial{
			HoldID: h.ID, RunID: h.RunID, Approvals: approvals, Required: h.RequiredApprovals}, "engine")}
	default:
		asDecided := *h
		asDecided.EditedOutput = p.EditedOutput
		published := "" // a rejection publishes nothing
		if p.Status == store.HoldApproved && !IsBudgetHold(h.ID, h.RunID) {
			published = h.Output
			if p.EditedOutput != nil {
				published = *p.EditedOutput
			}
		}
		var approvers []string
		editedBy := ""
		if p.Status == store.HoldApproved {
			if len(p.Approvals) > 1 {
				for _, x := range p.Approvals {
					approvers = append(approvers, x.By)
				}
			}
			editedBy = HoldEditor(p.Approvals)
		}
		p.Events = []store.EventAppendParams{transcript.Encode(transcript.HoldDecided{
			HoldID: h.ID, RunID: h.RunID, Status: p.Status, DecidedBy: a.by, DecidedVia: a.via, Comment: a.comment,
			Title: HoldTitle(&asDecided, nil), Command: h.Command, GateLabel: h.GateLabel, Workflow: h.WorkflowName,
			Owner: h.OwnerUID, Required: h.RequiredApprovals, Published: published, Edited: p.EditedOutput != nil,
			Approvers: approvers, EditedBy: editedBy}, "engine")}
		if o := p.Outcome; o != nil {
			p.Events = append(p.Events, finishedEvent(&store.Run{ID: h.RunID, Status: o.Status, ErrorKind: o.ErrorKind, Error: o.Error}))
		}
	}
	return p, ""
}

// HoldEditor is who gave an approved hold's edited output: the last
// approval that came with one ("" for none, or a hold decided before
// approvals said so). With several approvals it need not be the decider.
func HoldEditor(approvals []store.HoldApproval) string {
	by := ""
	for _, a := range approvals {
		if a.Edited {
			by = a.By
		}
	}
	return by
}

// decided tells subscribers and, for an approval, wakes the runner.
func (e *Engine) decided(ctx context.Context, out *store.Hold) {
	if out.Status == store.HoldOpen {
		e.notify(Event{Kind: EventHoldApprovedPartial, RunID: out.RunID, HoldID: out.ID, ItemID: out.ItemID, SessionID: out.SessionID, Status: out.Status})
		return
	}
	e.notify(Event{Kind: EventHoldDecided, RunID: out.RunID, HoldID: out.ID, ItemID: out.ItemID, SessionID: out.SessionID, Status: out.Status})
	if out.Status == store.HoldApproved {
		e.resumeHint.Store(true)
		e.signal()
	} else {
		e.notify(Event{Kind: EventRunFinished, RunID: out.RunID, ItemID: out.ItemID, SessionID: out.SessionID, Status: store.RunCancelled})
	}
	e.log.InfoContext(ctx, "hold decided", slog.String("hold_id", out.ID), slog.String("run_id", out.RunID),
		slog.String("status", out.Status), slog.String("by", out.DecidedBy), slog.String("via", out.DecidedVia))
	e.traceHoldWait(ctx, out)
}

// traceHoldWait records a decided hold's wait, opened → decided, in the
// trace of its run's item. The wait outlives any one process, so it is
// written when it ends, with the times the store kept; the decision's own
// span (a Slack click, an API call) is linked.
func (e *Engine) traceHoldWait(ctx context.Context, h *store.Hold) {
	if !e.traced || h.DecidedAt == nil {
		return
	}
	it, err := e.store.QueueItemGetByID(ctx, h.ItemID)
	if err != nil || it.TraceContext == "" {
		return
	}
	_, span := e.tracer.Start(tracing.Join(ctx, it.TraceContext), tracing.SpanHold, trace.WithTimestamp(h.CreatedAt),
		trace.WithLinks(trace.LinkFromContext(ctx)), trace.WithAttributes(tracing.HoldIDKey.String(h.ID),
			tracing.RunID.String(h.RunID), tracing.HoldGate.String(h.GateLabel), tracing.HoldStatus.String(h.Status),
			tracing.HoldVia.String(h.DecidedVia), tracing.WorkflowCommand.String(h.Command)))
	span.End(trace.WithTimestamp(*h.DecidedAt))
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
	case d.KeyID != "" && d.DisplayName != "":
		return d.DisplayName
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
		_, err := e.decide(ctx, h, attempt{decision: decision, by: "engine", key: "engine", via: "timeout",
			comment: "hold timed out", force: true})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return n, err
		}
		n++
	}
	return n, nil
}

// Cancelled is what CancelSessionRuns did: Runs counts the running runs
// it cancelled and the held ones it rejected, HeldOpen the held runs it
// left open because the caller is not a steward.
type Cancelled struct {
	Runs     int `json:"runs"`
	HeldOpen int `json:"heldOpen"`
}

// CancelSessionRuns is /terminate's part in the engine (SPEC §4.3): it
// cancels a session's in-flight runs for anyone who may write to the
// session (their model calls' contexts are cancelled and they settle
// `cancelled`). A held run is cancelled by rejecting its hold, which is a
// steward's decision: by a steward, audited and shown on its cards like any
// other rejection (comment `terminated`); by anyone else it stays open.
func (e *Engine) CancelSessionRuns(ctx context.Context, sessionID string, by Decider) (Cancelled, error) {
	var c Cancelled
	isSteward, err := e.IsSteward(ctx, by)
	if err != nil {
		return c, err
	}
	running, err := e.store.RunList(ctx, &store.RunListParams{SessionID: sessionID, Status: store.RunRunning, Limit: 500})
	if err != nil {
		return c, err
	}
	name := deciderName(by)
	ids := make([]string, len(running))
	for i, r := range running {
		ids[i] = r.ID
	}
	// Durable first: a run another process holds reads the request with its
	// next heartbeat; one held here is cancelled at once below.
	if err := e.store.RunCancelRequest(ctx, ids, name); err != nil {
		return c, err
	}
	cause := fmt.Errorf("%w by %s", errRunCancelled, name)
	for _, r := range running {
		e.cancelRunning(r, cause)
		c.Runs++
	}
	held, err := e.store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: sessionID, Limit: 500})
	if err != nil {
		return c, err
	}
	if !isSteward {
		c.HeldOpen = len(held)
		return c, nil
	}
	for _, h := range held {
		_, err := e.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject", Comment: "terminated", Decider: by})
		if errors.Is(err, store.ErrConflict) {
			continue // decided meanwhile by someone else
		}
		if err != nil {
			return c, err
		}
		c.Runs++
	}
	return c, nil
}

// cancelRunning cancels a running run's context with cause when this
// process executes it, or, when it is claimed here but not started, asks
// for it to be cancelled as it starts; another process's run reads the
// durable request (RunCancelRequest) with its next heartbeat. done is
// closed when this process stops executing the run; nil when it is not
// executing it now.
func (e *Engine) cancelRunning(r *store.Run, cause error) (done <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cancel := e.inflight[r.ID]; cancel != nil {
		cancel(cause)
		return e.runDone[r.ID]
	}
	if r.RunnerID == e.cfg.RunnerID {
		e.cancelReq[r.ID] = cause
	}
	return nil
}
