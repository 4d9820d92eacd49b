package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// EventHoldReminder is a reminder that a hold is still open (Policy `Remind
// after`): the Slack bridge posts it into the hold's thread and the holds
// channel, mentioning the stewards its payload names.
const EventHoldReminder = transcript.TypeHoldReminder

// MaxReminders bounds the reminders of one hold (SPEC §4.3).
const MaxReminders = 3

// remindHolds sends the reminders that are due: each is a transcript line
// written with the hold's reminder count in one compare-and-set, so however
// often passes run, on however many processes, and whatever restarts in
// between, each reminder is written once. The next one is due an interval
// after this one is sent, not after it was due: a process that was down
// for a while sends one reminder when it is back, not every one it missed.
func (e *Engine) remindHolds(ctx context.Context) (int, error) {
	now := e.cfg.Now()
	hs, err := e.store.HoldListRemindDue(ctx, now, 50)
	if err != nil || len(hs) == 0 {
		return 0, err
	}
	n := 0
	for _, h := range hs {
		p := &store.HoldRemindParams{HoldID: h.ID, ExpectSent: h.RemindersSent, Now: now}
		nth := h.RemindersSent + 1
		if nth < MaxReminders && h.RemindEvery > 0 {
			next := now.Add(h.RemindEvery)
			p.Next = &next
		}
		if nth <= MaxReminders {
			stewards, err := e.SlackDeciders(ctx, h)
			if err != nil {
				return n, err
			}
			p.Events = []store.EventAppendParams{transcript.Encode(transcript.HoldReminder{
				HoldID: h.ID, RunID: h.RunID, Title: h.Title, Command: h.Command, GateLabel: h.GateLabel,
				N: nth, Of: MaxReminders, Stewards: stewards, OpenedAt: h.CreatedAt.UTC().Format(time.RFC3339)}, "engine")}
		}
		if _, err := e.store.HoldRemind(ctx, p); errors.Is(err, store.ErrConflict) {
			continue // decided, or reminded by another process, since it was read
		} else if err != nil {
			return n, err
		}
		if len(p.Events) == 0 {
			continue
		}
		n++
		e.log.InfoContext(ctx, "hold reminder", slog.String("hold_id", h.ID), slog.Int("n", nth))
		e.notify(Event{Kind: EventHoldReminder, RunID: h.RunID, HoldID: h.ID, ItemID: h.ItemID, SessionID: h.SessionID, Status: h.Status})
	}
	return n, nil
}

// SlackStewards lists the Slack user ids of everyone who may decide holds
// (SPEC §4.3): SLACK_STEWARDS and the linked Slack ids of console stewards
// and admins, sorted, each once.
func (e *Engine) SlackStewards(ctx context.Context) ([]string, error) {
	ids, _, err := e.slackStewards(ctx)
	return ids, err
}

// slackStewards answers the Slack stewards and, for those linked to a
// console account, that account's id.
func (e *Engine) slackStewards(ctx context.Context) ([]string, map[string]string, error) {
	users, err := e.store.UserList(ctx)
	if err != nil {
		return nil, nil, err
	}
	linked := map[string]string{}
	ids := slices.Clone(e.cfg.SlackStewards)
	for _, u := range users {
		if u.SlackUserID != "" && store.CanDecide(u.Role) {
			ids = append(ids, u.SlackUserID)
		}
		if u.SlackUserID != "" {
			linked[u.SlackUserID] = u.ID
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), linked, nil
}

// SlackDeciders lists the Slack stewards who may still approve h: not the
// requester when the workflow refuses self approval, nor a steward whose
// approval it already counts. A reminder mentions them.
func (e *Engine) SlackDeciders(ctx context.Context, h *store.Hold) ([]string, error) {
	ids, linked, err := e.slackStewards(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, id := range ids {
		d := Decider{SlackUserID: id, UserID: linked[id]}
		if !h.SelfApproval && isOwner(h.OwnerUID, d) {
			continue
		}
		if slices.ContainsFunc(h.Approvals, func(a store.HoldApproval) bool { return a.Key == deciderKey(d) }) {
			continue
		}
		out = append(out, id)
	}
	return out, nil
}
