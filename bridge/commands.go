package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"unicode"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// helpText is help in a channel; dmHelpText in a DM, where every message
// reaches the bot and its top-level messages are one conversation.
const (
	helpText   = "*Holdfast* — mention me in a thread:\n" + helpList + "Anything else is a message to me; later replies in the thread reach me without a mention."
	dmHelpText = "*Holdfast* — send me:\n" + helpList + "Anything else is a message to me."
)

const helpList = "• `help` — this list\n" +
	"• `workflows` — live workflows and what they do\n" +
	"• `&lt;command&gt; &lt;brief&gt;` or `run &lt;command&gt; &lt;brief&gt;` — queue a workflow, e.g. `draft-memo A memo about otters`\n" +
	"• `status` · `terminate` · `compact` — this thread's session\n" +
	"• `policy manual|auto|yolo` — how much of this thread's output is held for review\n" +
	"• `approve [short id] [comment]` · `reject [short id] [reason]` — decide this thread's open hold (stewards; with several, `approve` alone lists their short ids)\n"

// handleMention runs a mention (or DM): a command, an enqueue, or a chat turn
// in the thread's session.
func (b *Bridge) handleMention(ctx context.Context, it *store.SlackInboxItem, m *Message, log *slog.Logger) error {
	root := m.Root()
	if m.ChannelType == "im" && m.ThreadTS == "" {
		root = dmThread // a DM's top-level messages are one conversation (SPEC §3)
	}
	if refused, err := b.refuseText(ctx, it, m.Channel, m.ThreadTS, m.User, "your message", m.Text); refused || err != nil {
		return err
	}
	// Recorded as markdown, with Slack's own text kept beside it (SPEC §5).
	text := b.markdown(ctx, stripMention(m.Text, b.botUserID.Load().(string)), true)
	said := b.said(ctx, m, true)
	ses, err := b.sessions.ResolveTag(ctx, threadTag(m.Channel, root), sessions.CreateParams{
		Title: engine.FirstLine(text, 80),
		Context: map[string]any{"platform": "slack", "channel": m.Channel, "threadTs": root, "user": m.User,
			"channelType": m.ChannelType, contextMessageTS: m.TS},
		Source: sessions.Source{Via: sessions.ViaSlack, UserID: actor(m.User)},
	})
	if err != nil {
		return fmt.Errorf("resolve thread session: %w", err)
	}
	log = log.With(slog.String("session_id", ses.ID))
	// Before the mention is recorded or answered: the speaker's name and,
	// when the mention binds a thread that already had messages, those
	// messages, waited for at most BackfillWait (threads.go).
	wctx, cancel := context.WithTimeout(ctx, b.cfg.BackfillWait)
	speaker := b.userName(wctx, m.User, true)
	b.backfillThread(wctx, ses, m, m.TS, log)
	cancel()
	say := func(text string) error { return b.answer(ctx, it, "r", m.Channel, root, ses.ID, text) }
	cmd := commandOf(text)

	isWorkflow := false
	switch cmd.Name {
	case "", "help", "workflows", "status", "terminate", "compact", "policy", "approve", "reject", "run":
	default:
		_, err := b.store.WorkflowGetByCommand(ctx, "/"+cmd.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil {
			// A chat turn: the sessions runtime records the message itself,
			// and answers in the background so this worker never waits on a model.
			by := slackCaller(m.User)
			by.DisplayName = speaker
			_, err = b.sessions.MessageWith(ctx, ses.ID, text, said, by, true)
			if errors.Is(err, store.ErrConflict) {
				return say(":hourglass_flowing_sand: I'm still answering the previous message in this thread. Send this again when I'm done, or mention me with `terminate` to stop me.")
			}
			if err != nil {
				return fmt.Errorf("chat turn: %w", err)
			}
			return nil
		}
		isWorkflow = true
	}
	// A command is kept in the transcript too, before its effects (a run's
	// events, a policy change) so the transcript reads in order. The
	// delivery is marked processed only after those effects, so a replay
	// after a crash comes back here: the line is keyed by the Slack event.
	said.Text = text
	if _, err := b.store.SlackEventAppendOnce(ctx, it.Key, appendParams(ses.ID, m.User, said)); err != nil {
		return fmt.Errorf("record the mention: %w", err)
	}

	switch {
	case isWorkflow:
		return b.enqueue(ctx, it, m, root, ses.ID, cmd.Name, cmd.Arg, log)
	case cmd.Name == "" || cmd.Name == "help":
		if m.ChannelType == "im" {
			return say(dmHelpText)
		}
		return say(helpText)
	case cmd.Name == "workflows":
		return say(b.workflowList(ctx))
	case cmd.Name == "status" || cmd.Name == "terminate" || cmd.Name == "compact":
		res, err := b.sessions.Command(ctx, ses.ID, "/"+cmd.Name, slackCaller(m.User))
		if errors.Is(err, store.ErrForbidden) {
			return say(b.refusal(ctx, m.User, err))
		}
		if err != nil {
			return say(fmt.Sprintf(":warning: `%s` failed: %s", cmd.Name, b.escNames(ctx, store.ReasonOf(err))))
		}
		return say(b.commandReply(ctx, res))
	case cmd.Name == "policy":
		p := strings.ToLower(cmd.Arg)
		if p != "manual" && p != "auto" && p != "yolo" {
			return say("Usage: `policy manual|auto|yolo` — `manual` holds every output, `auto` follows each workflow's policy, `yolo` holds nothing.")
		}
		_, err := b.sessions.SetPolicy(ctx, ses.ID, p, slackCaller(m.User))
		if errors.Is(err, store.ErrForbidden) {
			return say(b.refusal(ctx, m.User, err))
		}
		if err != nil {
			return say(fmt.Sprintf(":warning: could not set the policy: %s", b.escNames(ctx, store.ReasonOf(err))))
		}
		return say(fmt.Sprintf("Policy for this thread is now `%s`.", p))
	case cmd.Name == "approve" || cmd.Name == "reject":
		return b.decideInThread(ctx, it, m, root, ses.ID, cmd)
	default: // run
		name, brief := cmd.Arg, ""
		if i := strings.IndexFunc(name, unicode.IsSpace); i >= 0 {
			name, brief = name[:i], strings.TrimSpace(name[i:])
		}
		if name == "" {
			return say("Usage: `run &lt;command&gt; &lt;brief&gt;` — see `workflows`.")
		}
		return b.enqueue(ctx, it, m, root, ses.ID, strings.ToLower(strings.TrimPrefix(name, "/")), brief, log)
	}
}

func (b *Bridge) workflowList(ctx context.Context) string {
	wfs, err := b.store.WorkflowList(ctx)
	if err != nil {
		return ":warning: could not list workflows: " + esc(store.ReasonOf(err))
	}
	sort.Slice(wfs, func(i, j int) bool { return wfs[i].Command < wfs[j].Command })
	var sb strings.Builder
	for _, w := range wfs {
		if w.Status != "live" || w.Command == "" {
			continue
		}
		fmt.Fprintf(&sb, "• `%s` — %s\n", strings.TrimPrefix(w.Command, "/"), esc(w.Summary))
	}
	if sb.Len() == 0 {
		return "No live workflows."
	}
	return "*Live workflows* (mention me with `&lt;command&gt; &lt;brief&gt;`):\n" + sb.String()
}

// enqueue queues a workflow item for the thread. The dedupe key is the
// message's, so however often Slack delivers it, it is enqueued once.
func (b *Bridge) enqueue(ctx context.Context, it *store.SlackInboxItem, m *Message, root, sessionID, name, brief string, log *slog.Logger) error {
	say := func(text string) error { return b.answer(ctx, it, "q", m.Channel, root, sessionID, text) }
	payload := map[string]any{
		"brief":  brief,
		"source": map[string]any{"platform": "slack", "channel": m.Channel, "threadTs": root, "user": m.User},
	}
	item, enqueued, err := b.engine.Enqueue(ctx, engine.EnqueueParams{
		Command: "/" + name, DedupeKey: "slack:" + m.Channel + ":" + m.TS, Payload: payload,
		SessionID: sessionID, OwnerUID: actor(m.User),
	})
	var notCompiled *NotCompiledError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return say(fmt.Sprintf("There is no workflow `%s`. Try `workflows`.", esc(name)))
	case errors.As(err, &notCompiled):
		return say(b.notCompiledText(name, notCompiled))
	case errors.Is(err, store.ErrConflict):
		return say(fmt.Sprintf(":information_source: I can't run `%s`: %s.", esc(name), esc(store.ReasonOf(err))))
	case err != nil:
		return fmt.Errorf("enqueue /%s: %w", name, err)
	}
	log.InfoContext(ctx, "slack: enqueued", slog.String("command", name), slog.String("item_id", item.ID), slog.Bool("enqueued", enqueued))
	// Also when the item already existed: after a crash between the enqueue
	// and this write, the replayed delivery still acknowledges it (once:
	// the key is the item's).
	return b.enqueueOutbox(ctx, queuedAck(m.Channel, root, name, item.ID))
}

// queuedAck is the "Queued …" line of an item enqueued from a thread. The
// runner may start the item before this write, so the mirror queues the
// same line (same dedupe key: whichever is first wins) ahead of the run's
// "Started" line; either way the thread reads in order.
func queuedAck(channel, threadTS, name, itemID string) *store.SlackOutboxAddParams {
	return &store.SlackOutboxAddParams{DedupeKey: "queued:" + itemID, Queue: queueOf(channel, threadTS),
		Method: store.SlackPost, Channel: channel, ThreadTS: postTS(threadTS),
		Text: fmt.Sprintf(":inbox_tray: Queued `%s`.", esc(name))}
}

// refusal tells a Slack user why the engine refused them, naming who may.
func (b *Bridge) refusal(ctx context.Context, user string, err error) string {
	who := "a steward"
	if len(b.cfg.Stewards) > 0 {
		who = "a steward (" + strings.Join(mentionAll(b.cfg.Stewards), ", ") + ", or a console steward)"
	}
	return fmt.Sprintf(":no_entry: <@%s>, %s. Nothing was changed; ask %s.", user, b.escNames(ctx, store.ReasonOf(err)), who)
}

// maxThreadHolds bounds the open holds a thread decision lists.
const maxThreadHolds = 10

// maxThreadHoldsNamed bounds the holds of a thread a hold's name is looked
// for among (the store answers at most 500 a call).
const maxThreadHoldsNamed = 500

// decideInThread is `@bot approve|reject [short id] [comment]`: it decides
// the thread's open hold exactly as the card's buttons do. The first word
// names a hold when it is one of the thread's holds' short id or full id
// (engine.ShortHoldID); the rest is the comment. A name decides that hold alone;
// one that names several open holds, that can only be a hold id (a full
// id, a short id's shape with digits in it), or that is the short id of
// another thread's open hold, yet names no hold of the thread, decides
// nothing and says so; one naming a
// hold of the thread already decided gets the engine's answer that it was
// (never a decision of another hold with the name as its comment). Without
// a name, the thread's only open hold is decided with the whole argument as
// its comment; with several open holds nothing is decided and they are
// listed by short id and title: a guess could publish the wrong output.
func (b *Bridge) decideInThread(ctx context.Context, it *store.SlackInboxItem, m *Message, root, sessionID string, cmd Command) error {
	open, err := b.store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: sessionID, Limit: maxThreadHoldsNamed})
	if err != nil {
		return err
	}
	tell := func(text string) error { return b.ephemeral(ctx, it, "d", m.Channel, root, m.User, text) }
	// A decision of one hold goes to the engine, which refuses and audits
	// anyone who may not make it; where a steward would be handed a list to
	// choose from, anyone else is told that they cannot decide instead.
	steward, err := b.engine.IsSteward(ctx, slackCaller(m.User))
	if err != nil {
		return err
	}
	choose := func(text string) error {
		if !steward {
			text = b.refusal(ctx, m.User, store.Refuse(store.ErrForbidden, "only stewards may approve or reject holds"))
		}
		return tell(text)
	}
	decide := func(h *store.Hold, comment string) error {
		return b.decide(ctx, it, "d", decision{holdID: h.ID, verb: cmd.Name, comment: comment, user: m.User,
			channel: m.Channel, thread: root})
	}
	usage := fmt.Sprintf("Name one: mention me with `%s &lt;short id&gt; [comment]`, or use the buttons on its card.\n", cmd.Name)
	ref, rest := cmd.Arg, ""
	if i := strings.IndexFunc(ref, unicode.IsSpace); i >= 0 {
		ref, rest = ref[:i], strings.TrimSpace(ref[i:])
	}
	switch named := holdsNamed(open, ref); {
	case len(named) == 1:
		return decide(named[0], rest)
	case len(named) > 1:
		return choose(fmt.Sprintf("`%s` names %d open holds in this thread, so I decided nothing. Name one by its full id:\n%s",
			esc(ref), len(named), b.holdList(named)))
	}
	if ref != "" {
		// Not an open hold's name. A stale one (a hold of this thread
		// decided since), or a word that can only be a hold id, is not
		// taken for a comment on another hold.
		all, err := b.store.HoldList(ctx, &store.HoldListParams{SessionID: sessionID, Limit: maxThreadHoldsNamed})
		if err != nil {
			return err
		}
		named := holdsNamed(all, ref)
		if len(named) == 1 {
			return decide(named[0], rest) // the engine answers who decided it, and changes nothing
		}
		elsewhere := false
		if len(named) == 0 && isShortHoldID(ref) {
			// A short id copied from another thread's list.
			others, err := b.store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: maxThreadHoldsNamed})
			if err != nil {
				return err
			}
			elsewhere = len(holdsNamed(others, ref)) > 0
		}
		if len(named) > 1 || isHoldID(ref) || isMistypedShortHoldID(ref) || elsewhere {
			text := fmt.Sprintf("No open hold in this thread is `%s`, so I decided nothing.", esc(ref))
			if elsewhere {
				text = fmt.Sprintf("`%s` is an open hold of another thread, so I decided nothing here; decide it in its own thread.", esc(ref))
			}
			if len(open) > 0 {
				return choose(text + " " + usage + b.holdList(open))
			}
			return tell(text)
		}
	}
	switch len(open) {
	case 0:
		return tell("This thread has no open hold to decide.")
	case 1:
		return decide(open[0], cmd.Arg)
	}
	why := "so I decided nothing rather than guess which one you meant"
	if r := holdRef(ref); len(r) == engine.ShortHoldIDLen && strings.IndexFunc(r, notAlnum) < 0 {
		// Meant as a short id, by its length; any other word opens a comment.
		why = fmt.Sprintf("and `%s` is the short id of none of them, so I decided nothing", esc(ref))
	}
	return choose(fmt.Sprintf("This thread has %d open holds, %s. %s%s", len(open), why, usage, b.holdList(open)))
}

func notAlnum(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') }

// decision is one Slack user's decision attempt and where to answer it.
type decision struct {
	holdID, verb, comment, output, user string
	// channel and thread are where the user acted; with no channel (the
	// App Home, a modal) the answer goes to the hold's thread.
	channel, thread string
	// tellOutcome answers an accepted decision too (a modal's submitter
	// sees no card change in the modal itself).
	tellOutcome bool
}

// decide applies a Slack user's decision through the engine, as every
// surface does; refusals are answered to that user alone and change
// nothing. On success the mirror updates the cards when the engine records
// the decision in the transcript.
func (b *Bridge) decide(ctx context.Context, it *store.SlackInboxItem, suffix string, d decision) error {
	if d.channel == "" {
		if h, err := b.store.HoldGetByID(ctx, d.holdID); err == nil {
			d.channel, d.thread, _ = b.holdPlace(ctx, h)
		}
	}
	tell := func(text string) error { return b.tell(ctx, it.Key+":"+suffix, d.channel, d.thread, d.user, text) }
	h, err := b.engine.Decide(ctx, engine.DecideParams{HoldID: d.holdID, Decision: d.verb, Comment: d.comment, Output: d.output,
		Decider: slackCaller(d.user)})
	switch {
	case err == nil:
		b.log.InfoContext(ctx, "slack: hold decided", slog.String("hold_id", d.holdID), slog.String("decision", d.verb),
			slog.String("user", d.user), slog.String("status", h.Status))
		if h.Status == store.HoldOpen {
			// One of several approvals: the card stays until the last one.
			return tell(fmt.Sprintf("Your approval is recorded (%d of %d needed). The hold stays open until the rest approve.",
				len(h.Approvals), h.RequiredApprovals))
		}
		if !d.tellOutcome {
			return nil
		}
		title := engine.HoldTitle(h, nil)
		switch {
		case h.Status == store.HoldRejected:
			return tell(fmt.Sprintf(":no_entry_sign: You rejected *%s*. Its run is cancelled.", esc(title)))
		case h.EditedOutput != nil:
			return tell(fmt.Sprintf(":white_check_mark: You approved *%s* with your edit, which passed the workflow's checks; your text is what is published.", esc(title)))
		default:
			return tell(fmt.Sprintf(":white_check_mark: You approved *%s*; it is being published.", esc(title)))
		}
	case errors.Is(err, store.ErrForbidden):
		// Named by the verb refused: a requester may not approve their own
		// run but may reject it.
		return tell(fmt.Sprintf(":no_entry: You can't %s this hold: %s. Nothing was changed. Stewards can decide it here or %s.",
			d.verb, b.escNames(ctx, store.ReasonOf(err)), b.holdLink(d.holdID, "in the console")))
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrInvalid):
		return tell(fmt.Sprintf(":information_source: Nothing was changed: %s.", b.escNames(ctx, store.ReasonOf(err))))
	case errors.Is(err, store.ErrNotFound):
		return tell("That hold no longer exists.")
	default:
		return fmt.Errorf("decide hold %s: %w", d.holdID, err)
	}
}

// holdLink links a hold's console page, labelled with words a person
// reads ("in the console"), not its id.
func (b *Bridge) holdLink(holdID, label string) string {
	return fmt.Sprintf("<%s/holds/%s|%s>", b.cfg.BaseURL, holdID, label)
}

// handleInteraction runs a stored interaction: a click on a hold's
// Approve or Reject (on a card or in the App Home), or a submitted modal.
func (b *Bridge) handleInteraction(ctx context.Context, it *store.SlackInboxItem, in *Interaction) error {
	switch in.Type {
	case "view_submission":
		switch in.View.CallbackID {
		case callbackReview:
			return b.submitReview(ctx, it, in)
		case callbackRunWorkflow:
			return b.submitRunWorkflow(ctx, it, in)
		}
		return nil
	case "block_actions":
	default:
		return nil
	}
	for i, a := range in.Actions {
		var verb string
		switch a.ActionID {
		case actionApprove:
			verb = "approve"
		case actionReject:
			verb = "reject"
		default:
			continue // hold_review opened its modal before the ack
		}
		if err := b.decide(ctx, it, fmt.Sprint(i), decision{holdID: a.Value, verb: verb, user: in.User.ID,
			channel: in.ChannelID(), thread: in.ThreadTS()}); err != nil {
			return err
		}
	}
	return nil
}

// slackCaller is a Slack user as the engine and sessions runtime know them:
// the engine finds a linked console user itself, and the caller is recorded
// as "slack:<id>", which cards and threads show as a mention.
func slackCaller(user string) engine.Decider {
	return engine.Decider{SlackUserID: user, Via: "slack"}
}

// commandReply phrases a core command's result for a thread.
func (b *Bridge) commandReply(ctx context.Context, res *sessions.CommandResult) string {
	switch res.Command {
	case sessions.CmdTerminate:
		return ":octagonal_sign: " + sessions.CommandAnswer(res)
	case sessions.CmdCompact:
		if res.Summary != nil {
			// Just written by the command: its shape is the encoder's.
			ev, _ := transcript.Decode(res.Summary)
			if c, ok := ev.(transcript.CompactSummary); ok && c.Text != "" {
				return ":compression: Compacted. Summary so far:\n" + esc(c.Text)
			}
		}
		return ":compression: Compacted."
	}
	return b.statusLine(ctx, res.Session)
}

// statusRuns bounds the unfinished runs /status names.
const statusRuns = 5

// statusLine is /status for a thread: the session's chat, and the runs it
// started that have not finished, named and linked (a person asking for
// status means the work as much as the chat, which reads idle meanwhile).
func (b *Bridge) statusLine(ctx context.Context, s *store.Session) string {
	if s == nil {
		return "No session."
	}
	line := fmt.Sprintf("*Status:* `%s`", esc(s.Status))
	if s.DoneReason != "" {
		line += " (" + b.escNames(ctx, s.DoneReason) + ")"
	}
	line += fmt.Sprintf(" · *policy* `%s` · %s", esc(s.Policy), engine.Count(int(s.EventCount), "event", "events"))
	if s.ActiveRunID != "" {
		line += " · answering a message"
	}
	var runs []string
	for _, st := range []struct{ status, doing string }{{store.RunRunning, "is running"}, {store.RunSuspended, "waits for a steward"}} {
		rs, err := b.store.RunList(ctx, &store.RunListParams{SessionID: s.ID, Status: st.status, Limit: statusRuns})
		if err != nil {
			b.log.WarnContext(ctx, "slack: status: listing the session's runs", slog.String("session_id", s.ID), slog.Any("error", err))
			break
		}
		for _, r := range rs {
			runs = append(runs, fmt.Sprintf("<%s/runs/%s|%s> (`%s`) %s", b.cfg.BaseURL, r.ID,
				mrkdwn.Label([]byte(engine.RunTitle(r)), 80), esc(r.Command), st.doing))
		}
	}
	if len(runs) == 0 && s.OpenHolds > 0 {
		line += " · " + engine.Count(int(s.OpenHolds), "hold", "holds") + " waiting for a steward"
	}
	line += fmt.Sprintf(" · <%s/sessions/%s|this session in the console>", b.cfg.BaseURL, s.ID)
	if len(runs) > 0 {
		line += "\n• " + strings.Join(runs, "\n• ")
	}
	return line
}
