package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// actionReview opens the review modal (SPEC §5).
const actionReview = "hold_review"

// holdLine is what a transcript line says of a hold. Lines carry all a
// card shows (known); a line written before they did names little more
// than the hold, and cardInfo completes it from the store.
type holdLine struct {
	id, runID, title, gate, command, workflowName, owner string
	preview, published                                   string
	edited, known                                        bool
	required                                             int
}

func openedLine(e transcript.HoldOpened) holdLine {
	return holdLine{id: e.HoldID, runID: e.RunID, title: e.Title, gate: e.GateLabel, command: e.Command,
		workflowName: e.Workflow, owner: e.Owner, preview: e.Preview, required: e.Required, known: e.Required > 0}
}

func decidedHoldLine(e transcript.HoldDecided) holdLine {
	return holdLine{id: e.HoldID, runID: e.RunID, title: e.Title, gate: e.GateLabel, command: e.Command,
		workflowName: e.Workflow, owner: e.Owner, published: e.Published, edited: e.Edited, required: e.Required,
		known: e.Required > 0}
}

// lineOfHold is the line a hold as stored would write; preview, when set,
// is the line's own.
func lineOfHold(h *store.Hold, preview string) holdLine {
	l := holdLine{id: h.ID, runID: h.RunID, title: engine.HoldTitle(h, nil), gate: h.GateLabel, command: h.Command,
		workflowName: h.WorkflowName, owner: h.OwnerUID, preview: orDefault(preview, h.Preview), published: h.Output,
		required: h.RequiredApprovals, known: true}
	if h.EditedOutput != nil {
		l.published, l.edited = *h.EditedOutput, true
	}
	return l
}

// cardInfo is what every copy of a hold's card shows.
type cardInfo struct {
	id, runID, title, gate, workflow, requester string
	preview, published                          string
	edited                                      bool
	// budget: a Token budget hold, whose approval publishes nothing.
	budget   bool
	required int
	// known: the line or the store answered for the hold (a bare
	// transcript line of a hold the store has not is not known).
	known bool
}

func (b *Bridge) cardInfo(ctx context.Context, l holdLine) *cardInfo {
	if !l.known {
		if h, err := b.store.HoldGetByID(ctx, l.id); err == nil {
			l = lineOfHold(h, l.preview)
		}
	}
	c := &cardInfo{id: l.id, runID: l.runID, gate: orDefault(l.gate, "Review"), title: l.title, preview: l.preview,
		published: l.published, edited: l.edited, required: l.required, known: l.known,
		budget: engine.IsBudgetHold(l.id, l.runID)}
	if l.known {
		c.requester = b.requester(ctx, l.owner)
	}
	c.workflow = "`" + esc(l.command) + "`"
	if l.known && l.workflowName != "" {
		c.workflow = fmt.Sprintf("%s (`%s`)", esc(l.workflowName), esc(l.command))
	}
	c.title = orDefault(c.title, c.gate)
	return c
}

// firstSection renders markdown to Slack mrkdwn and answers its first
// section (≤ 3,000 characters, never cut inside a link or an entity) and
// whether there was more.
func firstSection(md string) (string, bool) {
	parts := mrkdwn.Blocks([]byte(md))
	if len(parts) == 0 || len(parts[0]) == 0 {
		return "", false
	}
	if sec, ok := parts[0][0].(*slack.SectionBlock); ok && sec.Text != nil {
		return sec.Text.Text, len(parts) > 1 || len(parts[0]) > 1
	}
	return "", len(parts) > 0
}

func (c *cardInfo) about() string {
	s := c.workflow
	if c.requester != "" {
		s += " · asked by " + c.requester
	}
	return s
}

// holdButtons is the actions block of a hold: Approve, Reject and
// "Comment or edit…", each carrying the hold id (SPEC §5).
func holdButtons(holdID string) *slack.ActionBlock {
	return slack.NewActionBlock("hold:"+holdID,
		slack.NewButtonBlockElement(actionApprove, holdID, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)).WithStyle(slack.StylePrimary),
		slack.NewButtonBlockElement(actionReject, holdID, slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false)).WithStyle(slack.StyleDanger),
		slack.NewButtonBlockElement(actionReview, holdID, slack.NewTextBlockObject(slack.PlainTextType, "Comment or edit…", false, false)),
	)
}

func mrkdwnSection(text string) *slack.SectionBlock {
	return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)
}

func mrkdwnContext(text string) *slack.ContextBlock {
	return slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, text, false, false))
}

// whereFrom is the holds channel copy's line linking the thread the hold
// came from.
func (b *Bridge) whereFrom(ctx context.Context, channel, thread string) string {
	if isDM(channel) {
		return " · from a direct message"
	}
	if link := b.permalink(ctx, channel, thread); link != "" {
		return fmt.Sprintf(" · from <%s|the thread> in <#%s>", link, channel)
	}
	return fmt.Sprintf(" · from <#%s>", channel)
}

// holdCards builds the hold card for the thread and, when configured, the
// holds channel (SPEC §5): title, workflow, gate label, who asked, a
// preview, the three buttons and the console link; the holds channel's copy
// also links the thread.
func (b *Bridge) holdCards(ctx context.Context, channel, thread string, e transcript.HoldOpened) []*store.SlackOutboxAddParams {
	c := b.cardInfo(ctx, openedLine(e))
	if c.id == "" {
		return nil
	}
	needs := ""
	if c.required > 1 {
		needs = fmt.Sprintf(" · needs %d approvals", c.required)
	}
	preview, more := firstSection(c.preview)
	if preview == "" {
		preview = "_(empty output)_"
	}
	if more {
		needs += " · preview shortened, the full output is in the console"
	}
	card := func(from string) string {
		blocks := []slack.Block{
			mrkdwnSection(fmt.Sprintf(":raised_hand: *%s*\n*%s* is waiting for a steward — %s", esc(c.title), esc(c.gate), c.about())),
			slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, preview, false, true), nil, nil),
			holdButtons(c.id),
			// The short id is what `@bot approve <short id>` takes in a
			// thread with several open holds.
			mrkdwnContext(fmt.Sprintf("%s · hold `%s` · %s%s%s", b.holdLink(c.id, "Open in the console"), engine.ShortHoldID(c.id),
				b.runLink(c.runID, "its run"), needs, from)),
		}
		bj, _ := json.Marshal(blocks) // slack-go's block types always marshal
		return string(bj)
	}
	text := fmt.Sprintf("Hold: %s — %s waits for a steward", esc(c.title), esc(c.gate))
	out := []*store.SlackOutboxAddParams{{DedupeKey: cardKey(c.id, "thread"), Queue: queueOf(channel, thread),
		Method: store.SlackPost, Channel: channel, ThreadTS: postTS(thread), Text: text, Blocks: card("")}}
	if hc := b.cfg.HoldsChannel; hc != "" {
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: cardKey(c.id, "holds"), Queue: queueOf(hc, ""),
			Method: store.SlackPost, Channel: hc, Text: text, Blocks: card(b.whereFrom(ctx, channel, thread))})
	}
	return out
}

// decidedLine says who decided a hold, how, when and why.
func decidedLine(e transcript.HoldDecided, at time.Time) (line, verb string) {
	verb, icon := "Approved", ":white_check_mark:"
	if e.Status == store.HoldRejected {
		verb, icon = "Rejected", ":no_entry_sign:"
	}
	line = fmt.Sprintf("%s *%s* by %s via %s at <!date^%d^{date_short_pretty} {time}|%s>", icon, verb,
		deciders(e), esc(orDefault(e.DecidedVia, "console")), at.Unix(), at.UTC().Format(time.RFC3339))
	if e.Comment != "" {
		line += ": " + esc(e.Comment)
	}
	return line, verb
}

// deciders names who decided: every approver of a hold that needed
// several, else the one decider.
func deciders(e transcript.HoldDecided) string {
	if len(e.Approvers) == 0 {
		return mention(orDefault(e.DecidedBy, "someone"))
	}
	names := make([]string, len(e.Approvers))
	for i, a := range e.Approvers {
		names[i] = mention(a)
	}
	return engine.Names(names)
}

// holdDecided updates every copy of the hold's card to the decision (who,
// via what, when, the comment and the text that is published, the edited
// one when edited; no buttons) and tells the requester in the thread,
// mentioning them (SPEC §4.3, §5).
func (b *Bridge) holdDecided(ctx context.Context, key, channel, thread string, at time.Time, e transcript.HoldDecided,
	batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	c := b.cardInfo(ctx, decidedHoldLine(e))
	decided, verb := decidedLine(e, at)
	body := "_Nothing was published._"
	switch {
	case verb == "Approved" && c.budget:
		body = "_The run goes on past its Token budget; nothing is published until it ends._"
	case verb == "Approved":
		label := "*Published:*"
		if c.edited {
			label = "*Published, as edited by the steward:*"
			if e.EditedBy != "" {
				label = "*Published, as edited by " + mention(e.EditedBy) + ":*"
			}
		}
		text, more := firstSection(c.published)
		if more {
			text += fmt.Sprintf("\n_(shortened: the whole text is %s)_", b.holdLink(c.id, "in the console"))
		}
		body = label + "\n" + orDefault(text, "_(empty)_")
	}
	var out []*store.SlackOutboxAddParams
	for _, where := range []string{"thread", "holds"} {
		card := b.queuedCard(ctx, c.id, where, batch)
		if card == nil {
			continue // no card was queued there
		}
		if !c.known {
			// The hold is not in the store (deleted, or a test's bare
			// transcript): keep what the card showed, without its buttons.
			out = append(out, decidedFromCard(c.id, where, card, decided, verb, e.DecidedBy))
			continue
		}
		from := ""
		if where == "holds" {
			from = b.whereFrom(ctx, channel, thread)
		}
		blocks := []slack.Block{
			mrkdwnSection(fmt.Sprintf("%s *%s*\n*%s* — %s", map[string]string{"Approved": ":white_check_mark:", "Rejected": ":no_entry_sign:"}[verb],
				esc(c.title), esc(c.gate), c.about())),
			mrkdwnSection(body),
			mrkdwnContext(decided),
			mrkdwnContext(fmt.Sprintf("%s · %s%s", b.holdLink(c.id, "Open in the console"), b.runLink(c.runID, "its run"), from)),
		}
		bj, _ := json.Marshal(blocks)
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: "update:" + c.id + ":" + where, Queue: card.Queue,
			Method: store.SlackUpdate, Channel: card.Channel,
			Text:   fmt.Sprintf("Hold %s: %s by %s", esc(c.title), strings.ToLower(verb), deciders(e)),
			Blocks: string(bj), RefKey: card.DedupeKey})
	}
	line := decided
	if c.requester != "" {
		line = fmt.Sprintf("%s, your request *%s*: %s", c.requester, esc(c.title), decided)
	}
	out = append(out, &store.SlackOutboxAddParams{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
		Channel: channel, ThreadTS: postTS(thread), Text: line})
	return out
}

// decidedFromCard is a decided card built from the card as it was posted:
// its blocks without the buttons, and the decision below them.
func decidedFromCard(holdID, where string, card *store.SlackOutboxAddParams, decided, verb, by string) *store.SlackOutboxAddParams {
	var blocks []map[string]any
	_ = json.Unmarshal([]byte(card.Blocks), &blocks)
	kept := blocks[:0]
	for _, bl := range blocks {
		if bl["type"] != "actions" {
			kept = append(kept, bl)
		}
	}
	kept = append(kept, map[string]any{"type": "context", "elements": []any{map[string]any{"type": "mrkdwn", "text": decided}}})
	bj, _ := json.Marshal(kept)
	return &store.SlackOutboxAddParams{DedupeKey: "update:" + holdID + ":" + where, Queue: card.Queue, Method: store.SlackUpdate,
		Channel: card.Channel, Text: fmt.Sprintf("Hold %s: %s by %s", holdID, strings.ToLower(verb), orDefault(by, "someone")),
		Blocks: string(bj), RefKey: card.DedupeKey}
}

// holdReminder posts a reminder (Policy Remind after) into the hold's
// thread and the holds channel, mentioning the stewards who may decide; a
// hold decided since the reminder was written is not reminded. That is
// the one thing its line cannot say, so a reminder reads its hold (a
// reminder, not every run).
func (b *Bridge) holdReminder(ctx context.Context, key, channel, thread string, e transcript.HoldReminder) []*store.SlackOutboxAddParams {
	l := holdLine{id: e.HoldID, runID: e.RunID, title: e.Title, gate: e.GateLabel, command: e.Command}
	h, err := b.store.HoldGetByID(ctx, e.HoldID)
	if err == nil {
		if h.Status != store.HoldOpen {
			return nil
		}
		l = lineOfHold(h, "")
	}
	c := b.cardInfo(ctx, l)
	var who []string
	for _, s := range e.Stewards {
		if s != "" {
			who = append(who, "<@"+s+">")
		}
	}
	waited := ""
	if h != nil {
		waited = " for " + age(time.Since(h.CreatedAt))
	}
	of := "3"
	if e.Of != 0 {
		of = strconv.Itoa(e.Of)
	}
	text := fmt.Sprintf(":alarm_clock: Reminder %d of %s: *%s* (%s) has waited%s for a steward.", e.N,
		of, esc(c.title), c.workflow, waited)
	if len(who) > 0 {
		text += " " + strings.Join(who, " ") + ", you may decide it:"
	} else {
		text += " Decide it:"
	}
	text += " use the card's buttons, or decide " + b.holdLink(c.id, "in the console") + "."
	out := []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
		Channel: channel, ThreadTS: postTS(thread), Text: text}}
	if hc := b.cfg.HoldsChannel; hc != "" {
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: key + ":holds", Queue: queueOf(hc, ""), Method: store.SlackPost,
			Channel: hc, Text: text + b.whereFrom(ctx, channel, thread)})
	}
	return out
}

// age says how long something has waited, roughly.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour")
	default:
		return plural(int(d/(24*time.Hour)), "day")
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
