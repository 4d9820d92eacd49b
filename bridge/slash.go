package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// The /holdfast slash command and the run_workflow message shortcut
// (SPEC §5).

const slashHelp = "*Holdfast* — `/holdfast &lt;subcommand&gt;`:\n" +
	"• `help` — this list\n" +
	"• `workflows` — live workflows and what they do\n" +
	"• `holds` — open holds waiting for a steward (yours; a steward sees all), with links\n" +
	"• `run &lt;command&gt; &lt;brief&gt;` — post a message here whose thread runs the workflow, e.g. `/holdfast run draft-memo A memo about otters`\n" +
	"In a thread, mention me instead (`@holdfast help`); on any message, *Run a workflow* in its shortcuts menu runs one in that message's thread."

// slashHolds bounds the holds `/holdfast holds` lists.
const slashHolds = 20

// slashResponse is an immediate answer to a slash command: shown only to
// the user who typed it.
type slashResponse struct {
	ResponseType string `json:"response_type"`
	Text         string `json:"text"`
}

func ephemeralResponse(text string) *slashResponse {
	return &slashResponse{ResponseType: "ephemeral", Text: text}
}

// slashCommand answers a /holdfast command (its form fields) within Slack's
// 3 seconds: help, workflows and holds from the store at once; run is
// stored in the inbox, whose worker posts the thread's first message and
// enqueues there. nil means an empty acknowledgement.
func (b *Bridge) slashCommand(ctx context.Context, form url.Values) (*slashResponse, error) {
	text := strings.TrimSpace(unescape(form.Get("text")))
	if err := store.CheckText("the command", text, 0); err != nil {
		return ephemeralResponse(refusedText(err)), nil
	}
	sub, arg := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		sub, arg = text[:i], strings.TrimSpace(text[i:])
	}
	switch strings.ToLower(sub) {
	case "workflows":
		return ephemeralResponse(strings.Replace(b.workflowList(ctx), "(mention me with `&lt;command&gt; &lt;brief&gt;`)",
			"(`/holdfast run &lt;command&gt; &lt;brief&gt;`)", 1)), nil
	case "holds":
		return ephemeralResponse(b.holdsList(ctx, form.Get("user_id"))), nil
	case "run":
		name, _, _ := strings.Cut(arg, " ")
		name = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(name), "/"))
		if name == "" {
			return ephemeralResponse("Usage: `/holdfast run &lt;command&gt; &lt;brief&gt;` — see `/holdfast workflows`."), nil
		}
		wf, err := b.store.WorkflowGetByCommand(ctx, "/"+name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return ephemeralResponse(fmt.Sprintf("There is no workflow `%s`. Try `/holdfast workflows`.", esc(name))), nil
		case err != nil:
			return nil, err
		case len(wf.Errors) > 0:
			return ephemeralResponse(b.notCompiledText(name, &NotCompiledError{Command: wf.Command, MemoID: wf.MemoID,
				First: wf.Errors[0], Count: len(wf.Errors)})), nil
		case wf.Status != "live":
			return ephemeralResponse(fmt.Sprintf(":information_source: I can't run `%s`: it is %s, not live, so it accepts no items.", esc(name), esc(wf.Status))), nil
		}
		if form.Get("channel_id") == "" || form.Get("user_id") == "" {
			return ephemeralResponse("I can't tell which channel this is; try again in a channel."), nil
		}
		key := "cmd:" + form.Get("trigger_id")
		if form.Get("trigger_id") == "" {
			key = interactionKey([]byte(form.Encode()))
		}
		if err := b.Accept(ctx, store.SlackKindCommand, key, "", []byte(form.Encode())); err != nil {
			return nil, err
		}
		return nil, nil
	default:
		return ephemeralResponse(slashHelp), nil
	}
}

// holdsList is `/holdfast holds` for user: the open holds, oldest first,
// with links to the console and their threads. As in App Home, a steward
// sees every one; anyone else only those they asked for, so no one reads
// the titles of another's holds (a DM's among them) here.
func (b *Bridge) holdsList(ctx context.Context, user string) string {
	steward, err := b.engine.IsSteward(ctx, slackCaller(user))
	if err != nil {
		return ":warning: could not list holds: " + esc(store.ReasonOf(err))
	}
	p, head := &store.HoldListParams{Status: store.HoldOpen, Limit: slashHolds + 1}, "*Open holds* (oldest first):\n"
	if !steward {
		p.OwnerUID, head = actor(user), "*Your open holds* (oldest first; stewards see them all):\n"
	}
	holds, err := b.store.HoldList(ctx, p)
	if err != nil {
		return ":warning: could not list holds: " + esc(store.ReasonOf(err))
	}
	switch {
	case len(holds) > 0:
	case steward:
		return "No holds are waiting for a steward."
	default:
		return "None of your runs waits for a steward. (Stewards see every open hold here.)"
	}
	var sb strings.Builder
	sb.WriteString(head)
	for i, h := range holds {
		if i == slashHolds {
			fmt.Fprintf(&sb, "• … and more: <%s/holds|all open holds in the console>\n", b.cfg.BaseURL)
			break
		}
		fmt.Fprintf(&sb, "• *%s* — `%s` · %s · waiting %s · %s", esc(engine.HoldTitle(h, nil)), esc(h.Command),
			esc(h.GateLabel), age(time.Since(h.CreatedAt)), b.holdLink(h.ID, "open"))
		if channel, thread, ok := b.holdPlace(ctx, h); ok {
			if link := b.permalink(ctx, channel, thread); link != "" {
				fmt.Fprintf(&sb, " · <%s|thread>", link)
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// slashRootWait bounds how long one attempt at a `/holdfast run` waits for
// its first message to be posted before it tries again later.
const slashRootWait = 10 * time.Second

// errNotYet defers a delivery without counting a failure: it waits for
// something else (the outbox) and is tried again later.
var errNotYet = errors.New("waiting for the outbox")

// handleSlashRun is a stored `/holdfast run <command> <brief>`: the bot
// posts a top-level message in the channel, and once Slack has given it a
// ts, that message's thread becomes the session and the workflow is queued
// there, as a mention in it would be. Replayed after a crash it finds its
// message (posted once: the outbox's exactly-once) and queues once (the
// dedupe key is the message's).
func (b *Bridge) handleSlashRun(ctx context.Context, it *store.SlackInboxItem) error {
	form, err := url.ParseQuery(string(it.Body))
	if err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	channel, user := form.Get("channel_id"), form.Get("user_id")
	raw := strings.TrimSpace(form.Get("text"))
	text := b.markdown(ctx, raw, true)
	cmd := commandOf(commandOf(text).Arg) // the words after "run"
	if channel == "" || user == "" || cmd.Name == "" {
		return fmt.Errorf("%w: a run command without a channel, user or workflow", errMalformed)
	}
	rootKey := "slash:" + it.Key
	if err := b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{DedupeKey: rootKey, Queue: queueOf(channel, ""),
		Method: store.SlackPost, Channel: channel,
		Text: fmt.Sprintf(":arrow_forward: <@%s> ran `/holdfast run %s` — this thread follows it.", user,
			esc(engine.FirstLine(strings.TrimSpace(cmd.Name+" "+cmd.Arg), 200)))}); err != nil {
		return err
	}
	root, err := b.awaitSent(ctx, rootKey, slashRootWait)
	if refused := (*refusedError)(nil); errors.As(err, &refused) {
		// Usually the bot is not in the channel. Slack's command reached
		// us anyway, and so does its response_url; without this answer
		// the user would hear nothing at all.
		bot, _ := b.botUserID.Load().(string)
		invite := "`/invite @holdfast`"
		if bot != "" {
			invite = fmt.Sprintf("`/invite` <@%s>", bot)
		}
		if rerr := b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{DedupeKey: rootKey + ":refused", Queue: "respond:" + it.Key,
			Method: store.SlackRespond, Channel: channel, User: user, ResponseURL: form.Get("response_url"),
			Text: fmt.Sprintf(":warning: `%s` did not start: Slack would not let me post in this channel (`%s`). Invite me with %s, or run it in a channel I'm in.",
				esc(cmd.Name), esc(refused.reason), invite)}); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}
	m := &Message{Type: "slash_command", Channel: channel, User: user, Text: raw, TS: root}
	ses, err := b.sessions.ResolveTag(ctx, threadTag(channel, root), sessions.CreateParams{
		Title:   engine.FirstLine(orDefault(cmd.Arg, cmd.Name), 80),
		Context: map[string]any{"platform": "slack", "channel": channel, "threadTs": root, "user": user},
		Source:  sessions.Source{Via: sessions.ViaSlack, UserID: actor(user)},
	})
	if err != nil {
		return fmt.Errorf("resolve the command's thread session: %w", err)
	}
	said := b.said(ctx, m, false)
	said.Text, said.Fields["slashCommand"] = "run "+cmd.Name+" "+cmd.Arg, true
	if _, err := b.store.SlackEventAppendOnce(ctx, it.Key, appendParams(ses.ID, user, said)); err != nil {
		return fmt.Errorf("record the command: %w", err)
	}
	return b.enqueue(ctx, it, m, root, ses.ID, cmd.Name, cmd.Arg, b.log.With(slog.String("session_id", ses.ID)))
}

// refusedError is a message Slack refused for good (reason is Slack's
// error, such as not_in_channel). It is errMalformed: trying the delivery
// again cannot help.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return "Slack refused the command's message: " + e.reason }
func (e *refusedError) Unwrap() error { return errMalformed }

// awaitSent waits until the outbox has sent the message key and answers
// its ts; errNotYet when it is not sent within wait (a Slack outage: the
// delivery is tried again later), an error when Slack refused it for good.
func (b *Bridge) awaitSent(ctx context.Context, key string, wait time.Duration) (string, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		sent := b.sentWait() // before the read, so a send in between wakes us
		m, err := b.store.SlackOutboxGetByKey(ctx, key)
		if err != nil {
			return "", err
		}
		switch m.Status {
		case store.SlackOutboxSentSt:
			return m.SentTS, nil
		case store.SlackOutboxFailed:
			return "", &refusedError{reason: m.LastError}
		}
		select {
		case <-sent:
		case <-t.C:
			return "", errNotYet
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// runMeta is the run_workflow modal's private_metadata: the thread its
// run joins.
type runMeta struct {
	Channel  string `json:"channel"`
	ThreadTS string `json:"threadTs"`
}

func parseRunMeta(s string) (*runMeta, error) {
	var m runMeta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if m.Channel == "" || m.ThreadTS == "" {
		return nil, errors.New("run_workflow metadata without a channel or thread")
	}
	return &m, nil
}

// openRunWorkflow answers the run_workflow message shortcut before it is
// acknowledged: a modal choosing a live workflow, its brief prefilled with
// the message's text, that runs in the message's thread (SPEC §5).
func (b *Bridge) openRunWorkflow(ctx context.Context, in *Interaction, key string) {
	channel := in.ChannelID()
	thread := threadOfMessage(channel, in.Message.TS, in.Message.ThreadTS)
	log := b.log.With(slog.String("channel", channel), slog.String("user", in.User.ID))
	tell := func(text string) {
		if err := b.tell(ctx, "shortcut:"+key, channel, postTSOf(thread, in.Message.ThreadTS), in.User.ID, text); err != nil {
			log.ErrorContext(ctx, "slack: queueing a shortcut answer", slog.Any("error", err))
		}
	}
	wfs, err := b.store.WorkflowList(ctx)
	if err != nil {
		log.ErrorContext(ctx, "slack: listing workflows for the shortcut", slog.Any("error", err))
		tell(":warning: I could not list the workflows just now; try again.")
		return
	}
	sort.Slice(wfs, func(i, j int) bool { return wfs[i].Command < wfs[j].Command })
	plain := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
	}
	var opts []*slack.OptionBlockObject
	for _, w := range wfs {
		if w.Status != "live" || w.Command == "" || len(opts) == 100 { // a static_select holds at most 100 options
			continue
		}
		opts = append(opts, slack.NewOptionBlockObject(w.Command, plain(clipRunes(w.Command+" — "+orDefault(w.Summary, w.Title), 75)), nil))
	}
	if len(opts) == 0 {
		tell("No workflows are live, so there is nothing to run.")
		return
	}
	meta, _ := json.Marshal(runMeta{Channel: channel, ThreadTS: thread})
	brief := slack.NewPlainTextInputBlockElement(plain("What the workflow should work on"), "brief").
		WithInitialValue(clipRunes(b.markdown(ctx, in.Message.Text, false), reviewMaxOutput))
	brief.Multiline = true
	view := slack.ModalViewRequest{Type: slack.VTModal, CallbackID: callbackRunWorkflow, PrivateMetadata: string(meta),
		Title: plain("Run a workflow"), Submit: plain("Run"), Close: plain("Cancel"), Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewInputBlock("workflow", plain("Workflow"), nil, slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, plain("Choose one"), "workflow", opts...)),
			slack.NewInputBlock("brief", plain("Brief"), nil, brief),
		}}}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), triggerWindow)
	defer cancel()
	if _, err := b.api.OpenViewContext(octx, in.TriggerID, view); err != nil {
		log.WarnContext(ctx, "slack: views.open failed for the shortcut", slog.Any("error", err))
		tell(fmt.Sprintf(":warning: Slack did not open the form (%s); try the shortcut again.", esc(err.Error())))
	}
}

// postTSOf is the thread an answer about a message goes into: its thread,
// or none for a top-level message (the thread the run will start).
func postTSOf(thread, messageThread string) string {
	if messageThread == "" {
		return ""
	}
	return thread
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// submitRunWorkflow enqueues the shortcut modal's workflow in the
// message's thread session, as a mention there would, and records the
// request in the transcript.
func (b *Bridge) submitRunWorkflow(ctx context.Context, it *store.SlackInboxItem, in *Interaction) error {
	meta, err := parseRunMeta(in.View.PrivateMetadata)
	if err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	name := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(in.View.Input("workflow", "workflow")), "/"))
	brief := strings.TrimSpace(in.View.Input("brief", "brief"))
	user := in.User.ID
	if name == "" {
		return b.tell(ctx, it.Key, meta.Channel, meta.ThreadTS, user, "Choose a workflow to run.")
	}
	// The dedupe key is the modal's: one view, one item, however often the
	// submission is delivered.
	m := &Message{Type: "shortcut", Channel: meta.Channel, User: user, TS: "shortcut:" + in.View.ID, ThreadTS: meta.ThreadTS}
	ses, err := b.sessions.ResolveTag(ctx, threadTag(meta.Channel, meta.ThreadTS), sessions.CreateParams{
		Title: engine.FirstLine(orDefault(brief, name), 80),
		Context: map[string]any{"platform": "slack", "channel": meta.Channel, "threadTs": meta.ThreadTS, "user": user,
			contextMessageTS: m.TS},
		Source: sessions.Source{Via: sessions.ViaSlack, UserID: actor(user)},
	})
	if err != nil {
		return fmt.Errorf("resolve the shortcut's thread session: %w", err)
	}
	log := b.log.With(slog.String("session_id", ses.ID))
	// As a mention binding the thread would: the thread's messages so far
	// (all of them before the submission arrived) are fetched first, so a
	// workflow reading the thread sees them.
	wctx, cancel := context.WithTimeout(ctx, b.cfg.BackfillWait)
	b.backfillThread(wctx, ses, m, slackTS(it.ReceivedAt), log)
	cancel()
	said := b.said(ctx, m, false)
	said.Text, said.Fields["shortcut"] = "run "+name+" "+brief, true
	delete(said.Fields, "raw")
	if _, err := b.store.SlackEventAppendOnce(ctx, it.Key, appendParams(ses.ID, user, said)); err != nil {
		return fmt.Errorf("record the shortcut: %w", err)
	}
	return b.enqueue(ctx, it, m, meta.ThreadTS, ses.ID, name, brief, log)
}
