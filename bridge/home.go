package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// App Home (SPEC §5): a user's Home tab lists the open holds they may
// decide, with the card's buttons, and their own recent runs. It is
// published when they open it and whenever a hold they could decide opens
// or is decided. A publish goes through the outbox like every write, but
// its view is rendered when it is sent, so however late a queued publish
// goes out it shows the holds as they are then.

// Bounds of one Home view (Slack allows 100 blocks; a hold takes three),
// and of the time its thread links may take.
const (
	homeHolds    = 20
	homeRuns     = 10
	homeLinkWait = 2 * time.Second
)

// homeQueue orders one user's publishes.
func homeQueue(user string) string { return "home:" + user }

// homePublish queues a publish of user's Home; key makes it once.
func homePublish(user, key string) *store.SlackOutboxAddParams {
	return &store.SlackOutboxAddParams{DedupeKey: "home:" + user + ":" + key, Queue: homeQueue(user),
		Method: store.SlackPublish, Channel: user, User: user} // a Home's "channel" is its user
}

// homeUpdates republishes the Home of every Slack steward, whose Home lists
// the hold an event opened or decided. key is the event's, so the mirror
// queues them once.
func (b *Bridge) homeUpdates(ctx context.Context, key string) []*store.SlackOutboxAddParams {
	stewards, err := b.engine.SlackStewards(ctx)
	if err != nil {
		b.log.WarnContext(ctx, "slack: listing stewards for their App Home", slog.Any("error", err))
		return nil
	}
	out := make([]*store.SlackOutboxAddParams, 0, len(stewards))
	for _, s := range stewards {
		out = append(out, homePublish(s, key))
	}
	return out
}

// homeOnEngineEvent republishes stewards' Homes for a hold that opened or
// was decided in a session with no Slack thread, which the mirror does not
// follow (a hold from a thread is the mirror's: its transcript line queues
// the publish durably).
func (b *Bridge) homeOnEngineEvent(ctx context.Context, ev engine.Event) {
	switch ev.Kind {
	case engine.EventHoldOpened, engine.EventHoldDecided, engine.EventHoldApprovedPartial:
	default:
		return
	}
	if ctx.Err() != nil {
		return // the bridge has stopped
	}
	if ev.SessionID != "" {
		s, err := b.store.SessionGetByID(ctx, ev.SessionID)
		if err == nil && CanReply(s) {
			return
		}
	}
	ups := b.homeUpdates(ctx, store.NewID("hev"))
	if len(ups) == 0 {
		return
	}
	if err := b.enqueueOutbox(ctx, ups...); err != nil && ctx.Err() == nil {
		b.log.ErrorContext(ctx, "slack: queueing App Home updates", slog.String("hold_id", ev.HoldID), slog.Any("error", err))
	}
}

// homeOpened answers app_home_opened: the user's Home is published.
func (b *Bridge) homeOpened(ctx context.Context, it *store.SlackInboxItem, user, tab string) error {
	if user == "" || tab != "home" {
		return nil // the Messages tab is a DM, handled as one
	}
	return b.enqueueOutbox(ctx, homePublish(user, it.Key))
}

// homeView renders user's Home as it is now.
func (b *Bridge) homeView(ctx context.Context, user string) (*slack.HomeTabViewRequest, error) {
	steward, err := b.engine.IsSteward(ctx, slackCaller(user))
	if err != nil {
		return nil, err
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "Holdfast", false, false)),
	}
	if !steward {
		stewards, err := b.engine.SlackStewards(ctx)
		if err != nil {
			return nil, err
		}
		who := "No one in Slack is a steward yet; an admin can make someone one."
		if len(stewards) > 0 {
			who = "The stewards here are " + engine.Names(mentionAll(stewards)) + "."
		}
		blocks = append(blocks, mrkdwnSection("You are not a steward, so no holds wait for your decision. "+who))
	} else {
		holds, err := b.store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: homeHolds + 1})
		if err != nil {
			return nil, err
		}
		more := len(holds) > homeHolds
		holds = holds[:min(len(holds), homeHolds)]
		head := "*Holds waiting for a steward*"
		if len(holds) == 0 {
			head += "\nNothing is waiting. :tada:"
		}
		blocks = append(blocks, mrkdwnSection(head))
		// Thread links ask Slack (cached); all of them together may take
		// this long, after which the rest are built from the workspace URL.
		links, cancel := context.WithTimeout(ctx, homeLinkWait)
		defer cancel()
		for _, h := range holds {
			blocks = append(blocks, b.homeHold(ctx, links, h, user)...)
		}
		if more {
			blocks = append(blocks, mrkdwnContext(fmt.Sprintf("More are waiting: <%s/holds|all open holds in the console>", b.cfg.BaseURL)))
		}
	}
	blocks = append(blocks, slack.NewDividerBlock(), mrkdwnSection("*Your recent runs*"))
	runs, err := b.store.RunListByOwner(ctx, actor(user), homeRuns)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		blocks = append(blocks, mrkdwnContext("None yet: mention me in a thread with a workflow, or use `/holdfast run &lt;command&gt; &lt;brief&gt;`."))
	} else {
		var sb strings.Builder
		for _, r := range runs {
			// A title is markdown its asker wrote: plain text in a link's
			// label. An untitled run is named by its workflow.
			fmt.Fprintf(&sb, "• %s <%s/runs/%s|%s>", runState(r.Status), b.cfg.BaseURL, r.ID, mrkdwn.Label([]byte(engine.RunTitle(r)), 150))
			if runTitle(r) != "" {
				fmt.Fprintf(&sb, " — `%s`", esc(r.Command))
			}
			fmt.Fprintf(&sb, ", %s ago\n", age(time.Since(r.CreatedAt)))
		}
		blocks = append(blocks, mrkdwnSection(sb.String()))
	}
	blocks = append(blocks, slack.NewDividerBlock(),
		mrkdwnContext(fmt.Sprintf("<%s/|Open the Holdfast console>", b.cfg.BaseURL)))
	return &slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}, nil
}

// runState says a run's status as its asker reads it.
func runState(status string) string {
	switch status {
	case store.RunSuspended:
		return "_waiting for a steward_"
	case store.RunSucceeded:
		return "_done_"
	case store.RunRecoveryExhausted:
		return "_failed_"
	}
	return "_" + esc(strings.ReplaceAll(status, "_", " ")) + "_"
}

// homeHold is one hold in a steward's Home: what it is, how long it has
// waited, its thread, and the card's buttons (which work as on cards).
func (b *Bridge) homeHold(ctx, links context.Context, h *store.Hold, user string) []slack.Block {
	title := engine.HoldTitle(h, nil)
	line := fmt.Sprintf("*%s*\n`%s` · %s · waiting %s", esc(title), esc(h.Command), esc(h.GateLabel), age(time.Since(h.CreatedAt)))
	if who := b.requester(ctx, h.OwnerUID); who != "" {
		line += " · asked by " + who
	}
	if channel, thread, ok := b.holdPlace(ctx, h); ok {
		if link := b.permalink(links, channel, thread); link != "" {
			line += fmt.Sprintf(" · <%s|thread>", link)
		}
	}
	out := []slack.Block{mrkdwnSection(line)}
	var note []string
	if h.RequiredApprovals > 1 {
		note = append(note, fmt.Sprintf("%d of %d approvals", len(h.Approvals), h.RequiredApprovals))
	}
	if slices.ContainsFunc(h.Approvals, func(a store.HoldApproval) bool { return a.Key == actor(user) || a.By == actor(user) }) {
		note = append(note, "you approved it; it waits for another steward")
	}
	if !h.SelfApproval && h.OwnerUID == actor(user) {
		note = append(note, "you asked for it, so another steward must approve it")
	}
	if len(note) > 0 {
		out = append(out, mrkdwnContext(strings.Join(note, " · ")))
	}
	return append(out, holdButtons(h.ID))
}

// runTitle is what a run is about (payload.title, else its brief's first
// line), as the console shows it.
func runTitle(r *store.Run) string {
	if t := engine.RunTitle(r); t != r.Command {
		return t
	}
	return ""
}

// publishHome sends a queued publish: user's Home rendered now.
func (b *Bridge) publishHome(ctx context.Context, m *store.SlackOutboxMsg) error {
	view, err := b.homeView(ctx, m.User)
	if err != nil {
		return fmt.Errorf("render the App Home of %s: %w", m.User, err)
	}
	_, err = b.api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: m.User, View: *view})
	return err
}
