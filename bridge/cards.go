package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// actionReview opens the review modal (SPEC §5).
const actionReview = "hold_review"

// cardInfo is what every copy of a hold's card shows, read from the hold
// (and, for a hold the store cannot answer, from its transcript line).
type cardInfo struct {
	id, runID, title, gate, workflow, requester string
	preview, published                          string
	edited                                      bool
	required                                    int
	hold                                        *store.Hold
}

func (b *Bridge) cardInfo(ctx context.Context, p map[string]any) *cardInfo {
	c := &cardInfo{id: str(p, "holdId"), runID: str(p, "runId"), gate: orDefault(str(p, "gateLabel"), "Review"),
		title: str(p, "title"), preview: str(p, "preview")}
	command := str(p, "command")
	h, err := b.store.HoldGetByID(ctx, c.id)
	if err == nil {
		c.hold, c.required = h, h.RequiredApprovals
		c.runID, c.gate, command = orDefault(h.RunID, c.runID), orDefault(h.GateLabel, c.gate), orDefault(h.Command, command)
		c.title = engine.HoldTitle(h, nil)
		c.preview = orDefault(c.preview, h.Preview)
		c.requester = b.requester(ctx, h.OwnerUID)
		c.published = h.Output
		if h.EditedOutput != nil {
			c.published, c.edited = *h.EditedOutput, true
		}
	}
	c.workflow = "`" + esc(command) + "`"
	if h != nil && h.WorkflowName != "" {
		c.workflow = fmt.Sprintf("%s (`%s`)", esc(h.WorkflowName), esc(command))
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
func (b *Bridge) holdCards(ctx context.Context, channel, thread string, p map[string]any) []*store.SlackOutboxAddParams {
	c := b.cardInfo(ctx, p)
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
			mrkdwnContext(fmt.Sprintf("%s in the console · run `%s`%s%s", b.holdLink(c.id), esc(c.runID), needs, from)),
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
func decidedLine(p map[string]any, at time.Time) (line, verb string) {
	verb, icon := "Approved", ":white_check_mark:"
	if str(p, "status") == store.HoldRejected {
		verb, icon = "Rejected", ":no_entry_sign:"
	}
	line = fmt.Sprintf("%s *%s* by %s via %s at <!date^%d^{date_short_pretty} {time}|%s>", icon, verb,
		mention(orDefault(str(p, "decidedBy"), "someone")), esc(orDefault(str(p, "decidedVia"), "console")), at.Unix(),
		at.UTC().Format(time.RFC3339))
	if c := str(p, "comment"); c != "" {
		line += ": " + esc(c)
	}
	return line, verb
}

// holdDecided updates every copy of the hold's card to the decision (who,
// via what, when, the comment and the text that is published, the edited
// one when edited; no buttons) and tells the requester in the thread,
// mentioning them (SPEC §4.3, §5).
func (b *Bridge) holdDecided(ctx context.Context, key, channel, thread string, at time.Time, p map[string]any,
	batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	c := b.cardInfo(ctx, p)
	decided, verb := decidedLine(p, at)
	body := "_Nothing was published._"
	if verb == "Approved" {
		label := "*Published:*"
		if c.edited {
			label = "*Published, as edited by the steward:*"
		}
		text, more := firstSection(c.published)
		if more {
			text += fmt.Sprintf("\n_(shortened: the whole text is in %s)_", b.holdLink(c.id))
		}
		body = label + "\n" + orDefault(text, "_(empty)_")
	}
	var out []*store.SlackOutboxAddParams
	for _, where := range []string{"thread", "holds"} {
		card := batch[cardKey(c.id, where)]
		if card == nil {
			stored, err := b.store.SlackOutboxGetByKey(ctx, cardKey(c.id, where))
			if err != nil {
				continue // no card was queued there
			}
			card = &stored.SlackOutboxAddParams
		}
		if c.hold == nil {
			// The hold is not in the store (deleted, or a test's bare
			// transcript): keep what the card showed, without its buttons.
			out = append(out, decidedFromCard(c.id, where, card, decided, verb, p))
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
			mrkdwnContext(fmt.Sprintf("%s in the console · run `%s`%s", b.holdLink(c.id), esc(c.runID), from)),
		}
		bj, _ := json.Marshal(blocks)
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: "update:" + c.id + ":" + where, Queue: card.Queue,
			Method: store.SlackUpdate, Channel: card.Channel,
			Text:   fmt.Sprintf("Hold %s: %s by %s", esc(c.title), strings.ToLower(verb), esc(orDefault(str(p, "decidedBy"), "someone"))),
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
func decidedFromCard(holdID, where string, card *store.SlackOutboxAddParams, decided, verb string, p map[string]any) *store.SlackOutboxAddParams {
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
		Channel: card.Channel, Text: fmt.Sprintf("Hold %s: %s by %s", holdID, strings.ToLower(verb), orDefault(str(p, "decidedBy"), "someone")),
		Blocks: string(bj), RefKey: card.DedupeKey}
}

// holdReminder posts a reminder (Policy Remind after) into the hold's
// thread and the holds channel, mentioning the stewards who may decide; a
// hold decided since the reminder was written is not reminded.
func (b *Bridge) holdReminder(ctx context.Context, key, channel, thread string, p map[string]any) []*store.SlackOutboxAddParams {
	c := b.cardInfo(ctx, p)
	if c.hold != nil && c.hold.Status != store.HoldOpen {
		return nil
	}
	var who []string
	if ids, ok := p["stewards"].([]any); ok {
		for _, id := range ids {
			if s, ok := id.(string); ok && s != "" {
				who = append(who, "<@"+s+">")
			}
		}
	}
	waited := ""
	if c.hold != nil {
		waited = " for " + age(time.Since(c.hold.CreatedAt))
	}
	text := fmt.Sprintf(":alarm_clock: Reminder %s of %s: *%s* (%s) has waited%s for a steward.", esc(str(p, "n")),
		esc(orDefault(str(p, "of"), "3")), esc(c.title), c.workflow, waited)
	if len(who) > 0 {
		text += " " + strings.Join(who, " ") + ", you may decide it:"
	} else {
		text += " Decide it:"
	}
	text += " use the card's buttons, or " + b.holdLink(c.id) + " in the console."
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
