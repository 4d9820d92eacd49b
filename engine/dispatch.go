package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// previewChars bounds a hold's preview (the full output is kept too).
const previewChars = 1200

// output runs the Output step: it opens a hold when the policy or the
// session's posture asks for one and no approval is recorded on the run yet,
// and otherwise dispatches.
func (x *exec) output(ctx context.Context, i int) (*store.Run, error) {
	ctx, span := x.e.startSpan(ctx, tracing.SpanStep, tracing.StepIndex.Int(i+1), tracing.StepKind.String(workflow.KindOutput))
	defer span.End()
	start := x.e.cfg.Now()
	rec := &x.steps[i]
	at := start.UTC() // API times are UTC (SPEC §7); start keeps its monotonic reading
	*rec = store.RunStep{Kind: workflow.KindOutput, Status: StepRunning, StartedAt: &at}
	if !x.outputApproved() && hasWords(x.state.Output) {
		hold, err := x.needsHold(ctx)
		if err != nil {
			return nil, err
		}
		if hold {
			return x.suspend(ctx, i)
		}
	}
	out := x.state.Output
	if x.run.DecidedOutput != nil {
		out = *x.run.DecidedOutput
	}
	var (
		d     *store.DispatchParams
		extra store.EventAppendParams
		err   error
	)
	switch {
	case !hasWords(out):
		// Markup alone (a run asked with no brief renders "# \n\n"):
		// published, it would be an empty memo or reply. No steward is
		// asked to review it first: there is nothing to review.
		err = failf(KindDispatch, "nothing to publish: the output has no words (was the run given a brief?)")
	case x.manifest.Policy.Destination == workflow.DestinationReply:
		err = x.canReply(ctx)
		extra = transcript.Encode(transcript.AssistantMessage{Text: out, RunID: x.run.ID, Dispatch: "reply"}, "engine")
	default:
		var title string
		if d, title, err = x.memoDispatch(ctx, out); err == nil {
			extra = transcript.Encode(transcript.MemoDispatched{RunID: x.run.ID, MemoID: d.MemoID, Title: title, Body: out}, "engine")
		}
	}
	dur := x.e.cfg.Now().Sub(start)
	rec.DurationMs = dur.Milliseconds()
	x.e.met.stepDuration.WithLabelValues(workflow.KindOutput).Observe(dur.Seconds())
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			rec.Status, rec.ErrorKind, rec.Error = StepFailed, se.kind, se.Error()
			tracing.Fail(span, se.kind, err)
		}
		return nil, err
	}
	rec.Status = StepSucceeded
	x.stepEvent(i)
	dctx, dspan := x.e.startSpan(ctx, tracing.SpanDispatch, tracing.Destination.String(x.manifest.Policy.Destination))
	dispatch := func() *store.Run {
		r := x.settle(dctx, store.RunSucceeded, "", "", d, extra)
		switch {
		case r == nil:
			dspan.SetAttributes(tracing.RunStatus.String("taken_over"))
		case r.Status != store.RunSucceeded:
			tracing.Fail(dspan, r.ErrorKind, errors.New(r.Error))
		case r.DispatchMemoID != "":
			dspan.SetAttributes(tracing.MemoID.String(r.DispatchMemoID))
		}
		dspan.End()
		return r
	}
	if x.async {
		// Nothing the worker does next depends on this commit; the lease
		// stays with the run until it lands, so a crash before it recovers
		// the run and dispatches at most once.
		x.e.settleSlots <- struct{}{}
		x.e.settling.Add(1)
		x.handedOff = true // the settle ends the run's span
		go func() {
			defer func() {
				<-x.e.settleSlots
				x.e.settling.Done()
			}()
			dispatch()
			x.span.End()
		}()
		return nil, nil
	}
	r := dispatch()
	if r == nil {
		return nil, store.ErrLeaseLost
	}
	return r, nil
}

// outputApproved reports whether the decision recorded on the run approves
// its output (and not an earlier gate, such as its Token budget's).
func (x *exec) outputApproved() bool {
	return x.run.Decision == "approved" && x.run.HoldID != budgetHoldID(x.run.ID)
}

// needsHold applies SPEC §3's posture: manual holds everything, yolo
// nothing, auto (and sessionless items) follow the workflow's Approval.
func (x *exec) needsHold(ctx context.Context) (bool, error) {
	policyHold := x.manifest.Policy.Approval == workflow.ApprovalHold
	// The posture is read at the Output step, so a change made while the
	// model was working applies (a read from this same instant is reused).
	s, err := x.getSession(ctx, 100*time.Millisecond)
	if errors.Is(err, store.ErrNotFound) || (err == nil && s == nil) {
		return policyHold, nil
	} else if err != nil {
		return false, err
	}
	switch s.Policy {
	case "yolo":
		return false, nil
	case "auto":
		return policyHold, nil
	default: // manual, and anything unknown, is held
		return true, nil
	}
}

// suspend holds the run's output for review before step i (its Output).
func (x *exec) suspend(ctx context.Context, i int) (*store.Run, error) {
	label := x.manifest.Policy.GateLabel
	if label == "" {
		label = "Review output"
	}
	return x.hold(ctx, i, store.HoldIDForRun(x.run.ID), label)
}

// hold opens hold id before step i with the workflow's hold policy and
// suspends the run; the hold machinery (cards, decisions, timeouts, audit)
// is the same whatever the gate.
func (x *exec) hold(ctx context.Context, i int, id, label string) (*store.Run, error) {
	x.steps[i].Status = StepHeld
	p := x.manifest.Policy
	h := &store.Hold{
		ID: id, ItemID: x.run.ItemID, SessionID: x.run.SessionID, OwnerUID: x.run.OwnerUID,
		Command: x.manifest.Command, WorkflowName: x.manifest.Title, GateLabel: label,
		Preview: preview(x.state.Output), Output: x.state.Output, RequiredApprovals: max(p.Approvals, 1),
		SelfApproval: p.SelfApproval, OnTimeout: p.OnTimeout,
	}
	if h.OnTimeout == "" {
		h.OnTimeout = workflow.OnTimeoutReject
	}
	if p.HoldTimeout > 0 {
		exp := x.e.cfg.Now().Add(p.HoldTimeout)
		h.ExpiresAt = &exp
	}
	h.Title = HoldTitle(h, x.run.Payload)
	if p.RemindAfter > 0 {
		at := x.e.cfg.Now().Add(p.RemindAfter)
		h.RemindEvery, h.RemindAt = p.RemindAfter, &at
	}
	events := append(x.events, transcript.Encode(transcript.HoldOpened{
		HoldID: h.ID, RunID: x.run.ID, Command: h.Command, GateLabel: h.GateLabel, Preview: h.Preview, Title: h.Title,
		Workflow: h.WorkflowName, Owner: h.OwnerUID, Required: h.RequiredApprovals}, "engine"))
	hold, err := x.e.store.RunSuspend(ctx, &store.RunSuspendParams{
		RunCheckpointParams: store.RunCheckpointParams{RunID: x.run.ID, Lease: x.run.Lease, Now: x.e.cfg.Now(),
			Manifest: x.manifestArg(), Steps: x.steps, State: x.stateJSON(), Guards: x.guardsJSON(), Usage: x.usage(), Events: events},
		Hold: h,
	})
	if err != nil {
		return nil, err
	}
	x.flushed()
	x.span.SetAttributes(tracing.RunStatus.String(store.RunSuspended), tracing.HoldIDKey.String(hold.ID), tracing.HoldGate.String(label))
	x.e.notify(Event{Kind: EventHoldOpened, RunID: x.run.ID, HoldID: hold.ID, ItemID: x.run.ItemID, SessionID: x.run.SessionID, Status: hold.Status})
	x.log.InfoContext(ctx, "run held", slog.String("hold_id", hold.ID), slog.String("gate_label", label))
	r, err := x.e.store.RunGetByID(ctx, x.run.ID)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// hasWords reports whether s has a letter or a digit: text to read, not
// only markup and spaces.
func hasWords(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) })
}

func preview(s string) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= previewChars {
		return s
	}
	r := []rune(s)
	return string(r[:previewChars]) + "…"
}

// canReply refuses a reply with nowhere to land. A reply is the run's
// assistant_message in the session it was asked in, a console or API
// conversation or a Slack thread (the bridge mirrors it there, SPEC §4.3);
// a session the engine made for the item alone is nobody's conversation.
func (x *exec) canReply(ctx context.Context) error {
	const why = "destination reply needs a conversation: this run was enqueued in no session or Slack thread (enqueue it in one, or use Destination memo)"
	if x.run.SessionID == "" {
		return failf(KindDispatch, "%s", why)
	}
	s, err := x.getSession(ctx, 0)
	if err != nil || s == nil {
		return failf(KindDispatch, "%s: %v", why, err)
	}
	if s.Origin == store.OriginWorkflow {
		return failf(KindDispatch, "%s", why)
	}
	return nil
}

// memoDispatch builds the memo write: a new unlisted memo, or an in-place
// update of the stub payload.targetMemoId at the version it had at enqueue.
func (x *exec) memoDispatch(ctx context.Context, out string) (*store.DispatchParams, string, error) {
	pl := x.run.Payload
	d := &store.DispatchParams{}
	var notes *string
	if n, ok := pl["targetNotes"].(string); ok {
		notes = &n
	}
	var tags *[]string
	if raw, ok := pl["tags"].([]any); ok {
		ts := []string{}
		for _, t := range raw {
			if s, ok := t.(string); ok {
				ts = append(ts, s)
			}
		}
		tags = &ts
	}
	if src, ok := pl["source"].(map[string]any); ok {
		if id, _ := src["memoId"].(string); id != "" {
			ch, _ := src["contentHash"].(string)
			nh, _ := src["notesHash"].(string)
			if ch != "" || nh != "" {
				d.MoveGuard = &store.MoveGuard{MemoID: id, ContentHash: ch, NotesHash: nh}
			}
		}
	}
	if target, _ := pl["targetMemoId"].(string); target != "" {
		if x.run.TargetVersion == 0 {
			return nil, "", failf(KindDispatch, "target memo %s did not exist when the item was enqueued", target)
		}
		m, err := x.e.store.MemoGetByID(ctx, target)
		if errors.Is(err, store.ErrNotFound) {
			return nil, "", failf(KindDispatch, "target memo %s no longer exists", target)
		} else if err != nil {
			return nil, "", err
		}
		body := out
		d.MemoID = target
		d.Update = &store.MemoUpdateParams{ID: target, ExpectedVersion: x.run.TargetVersion, Body: &body, Notes: notes, Tags: tags}
		return d, m.Title, nil
	}
	c := &store.MemoCreateParams{Title: x.memoTitle(out), Body: out, Unlisted: true}
	if notes != nil {
		c.Notes = *notes
	}
	if tags != nil {
		c.Tags = *tags
	}
	d.MemoID, d.Create = store.NewID("mem"), c
	return d, c.Title, nil
}

// memoTitle: the output's first # heading, else payload.title, else
// "<workflow title> — <date>".
func (x *exec) memoTitle(out string) string {
	if h := strings.TrimSpace(workflow.FirstHeading([]byte(out))); h != "" {
		return h
	}
	if t, _ := x.run.Payload["title"].(string); strings.TrimSpace(t) != "" {
		return strings.TrimSpace(t)
	}
	return fmt.Sprintf("%s — %s", x.manifest.Title, x.e.cfg.Now().UTC().Format(time.DateOnly))
}
