package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// The review modal (SPEC §5): hold_review opens it with views.open on the
// click's trigger_id, at once and directly (a trigger id lives 3 seconds,
// longer than the outbox may take); its view_submission is acknowledged
// with an empty 200, stored, and decided through the engine exactly as the
// console's form is.

// Modal callback ids.
const (
	callbackReview      = "hold_review"
	callbackRunWorkflow = "run_workflow"
)

// reviewMaxOutput is the longest output the modal lets a steward edit
// (Slack's plain_text_input holds at most 3,000 characters); a longer one
// links the console instead.
const reviewMaxOutput = 3000

// triggerWindow bounds a views.open: past Slack's 3 seconds the trigger id
// is dead anyway.
const triggerWindow = 2500 * time.Millisecond

// openReview answers a hold_review click before it is acknowledged: a
// steward gets the modal, anyone else a refusal, as an ephemeral, that
// changes nothing. key (the delivery's digest) makes the refusal once.
func (b *Bridge) openReview(ctx context.Context, in *Interaction, key, holdID string) {
	log := b.log.With(slog.String("hold_id", holdID), slog.String("user", in.User.ID))
	channel, thread := in.ChannelID(), in.ThreadTS()
	h, err := b.store.HoldGetByID(ctx, holdID)
	if channel == "" && err == nil {
		channel, thread, _ = b.holdPlace(ctx, h)
	}
	tell := func(text string) {
		if err := b.tell(ctx, "review:"+key, channel, thread, in.User.ID, text); err != nil {
			log.ErrorContext(ctx, "slack: queueing a review answer", slog.Any("error", err))
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		tell("That hold no longer exists.")
		return
	case err != nil:
		log.ErrorContext(ctx, "slack: reading a hold to review", slog.Any("error", err))
		tell(fmt.Sprintf(":warning: I could not open the review just now; try again, or decide %s.", b.holdLink(holdID, "in the console")))
		return
	case h.Status != store.HoldOpen:
		tell(fmt.Sprintf(":information_source: Nothing to review: this hold was already %s by %s via %s.",
			h.Status, mention(h.DecidedBy), esc(h.DecidedVia)))
		return
	}
	steward, err := b.engine.IsSteward(ctx, slackCaller(in.User.ID))
	if err != nil {
		log.ErrorContext(ctx, "slack: checking a steward", slog.Any("error", err))
	}
	if !steward {
		tell(fmt.Sprintf(":no_entry: You can't decide this hold: <@%s> is not a steward; only stewards may decide holds. Nothing was changed. Stewards can decide it here or %s.",
			in.User.ID, b.holdLink(holdID, "in the console")))
		return
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), triggerWindow)
	defer cancel()
	if _, err := b.api.OpenViewContext(octx, in.TriggerID, b.reviewModal(ctx, h)); err != nil {
		log.WarnContext(ctx, "slack: views.open failed", slog.Any("error", err))
		tell(fmt.Sprintf(":warning: I could not open the review: %s. Click again, or decide %s.", slackTrouble(err), b.holdLink(holdID, "in the console")))
		return
	}
	log.InfoContext(ctx, "slack: review opened")
}

// slackTrouble says why a Slack call failed as a person can act on it:
// Slack's own error code, or that it did not answer in time; Go's error
// text (a URL, a dial error) says nothing to them, and the log has it.
func slackTrouble(err error) string {
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se):
		return "Slack answered `" + esc(se.Err) + "`"
	case errors.Is(err, context.DeadlineExceeded):
		return "Slack did not answer in time"
	}
	return "Slack could not be reached"
}

// reviewModal is the view of SPEC §5: approve or reject, a comment and,
// for an output of at most 3,000 characters, the output to edit.
func (b *Bridge) reviewModal(ctx context.Context, h *store.Hold) slack.ModalViewRequest {
	plain := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
	}
	title := engine.HoldTitle(h, nil)
	about := fmt.Sprintf("*%s*\n`%s` · %s", esc(title), esc(h.Command), esc(h.GateLabel))
	if who := b.requester(ctx, h.OwnerUID); who != "" {
		about += " · asked by " + who
	}
	approve := slack.NewOptionBlockObject("approve", plain("Approve"), nil)
	radio := slack.NewRadioButtonsBlockElement("decision", approve, slack.NewOptionBlockObject("reject", plain("Reject"), nil))
	radio.InitialOption = approve
	comment := slack.NewPlainTextInputBlockElement(plain("Why, for the requester and the audit"), "comment")
	comment.Multiline = true
	comment.MaxLength = store.MaxCommentChars
	blocks := []slack.Block{
		mrkdwnSection(about),
		slack.NewInputBlock("decision", plain("Decision"), nil, radio),
		slack.NewInputBlock("comment", plain("Comment"), nil, comment).WithOptional(true),
	}
	out := h.Output
	if h.EditedOutput != nil {
		out = *h.EditedOutput
	}
	if utf8.RuneCountInString(out) <= reviewMaxOutput {
		edit := slack.NewPlainTextInputBlockElement(nil, "output").WithInitialValue(out)
		edit.Multiline = true
		blocks = append(blocks, slack.NewInputBlock("output", plain("Output"),
			plain("Edit it to publish your text instead; an edit is checked by the workflow's Guards and comes only with an approval."), edit).WithOptional(true))
	} else {
		blocks = append(blocks, mrkdwnContext(fmt.Sprintf("The output is longer than %d characters, too long to edit here: edit it %s.",
			reviewMaxOutput, b.holdLink(h.ID, "in the console"))))
	}
	return slack.ModalViewRequest{Type: slack.VTModal, CallbackID: callbackReview, PrivateMetadata: h.ID,
		Title: plain("Review hold"), Submit: plain("Decide"), Close: plain("Cancel"), Blocks: slack.Blocks{BlockSet: blocks}}
}

// submitReview decides the hold of a submitted review as its submitter,
// and tells them the outcome, or the refusal, in the hold's thread.
func (b *Bridge) submitReview(ctx context.Context, it *store.SlackInboxItem, in *Interaction) error {
	verb := orDefault(in.View.Input("decision", "decision"), "approve")
	output := in.View.Input("output", "output")
	if verb == "reject" {
		output = "" // the box is always sent; a rejection publishes nothing, edited or not
	}
	return b.decide(ctx, it, "review", decision{holdID: in.View.PrivateMetadata, verb: verb,
		comment: in.View.Input("comment", "comment"), output: output, user: in.User.ID, tellOutcome: true})
}

// interactionThread orders stored interactions: a click in its thread's
// order, a review with the others of its hold, a shortcut's run with its
// thread.
func interactionThread(in *Interaction) string {
	switch {
	case in.Type == "view_submission" && in.View.CallbackID == callbackReview:
		return "hold:" + in.View.PrivateMetadata
	case in.Type == "view_submission":
		if meta, err := parseRunMeta(in.View.PrivateMetadata); err == nil {
			return queueOf(meta.Channel, meta.ThreadTS)
		}
		return "view:" + in.View.ID
	case in.ChannelID() == "":
		return "home:" + in.User.ID
	}
	return queueOf(in.ChannelID(), in.ThreadTS())
}
