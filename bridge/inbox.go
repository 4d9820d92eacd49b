package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// inboxAttempts is how often a delivery whose handling fails (a busy
// database, a failing engine call) is tried before it is set aside with its
// error.
const inboxAttempts = 3

// errMalformed marks deliveries no retry can help.
var errMalformed = errors.New("malformed delivery")

// processInbox claims deliveries for per-thread workers: threads run in
// parallel (so one slow command, such as /compact on a hosted model, holds
// up only its own thread), each thread's deliveries one at a time in
// arrival order. The claim is in the database (SlackInboxClaim: a thread's
// next delivery is claimable only once its head is done), so replicas on one
// database process each delivery once and each thread in order, as one
// process does. It claims only as many deliveries as it has free workers,
// never waits for them, and a worker that finishes wakes it again. A
// delivery whose handling fails is given back to be tried again after a
// pause (the rest of its thread waits for it), and after inboxAttempts it is
// marked with its error rather than retried forever.
func (b *Bridge) processInbox(ctx context.Context) (bool, error) {
	free := cap(b.inbox.sem) - len(b.inbox.sem) // only this loop takes slots
	if free == 0 {
		return false, nil
	}
	now := time.Now()
	items, err := b.store.SlackInboxClaim(ctx, &store.SlackClaimParams{Holder: b.cfg.Holder, Now: now,
		Until: now.Add(b.cfg.ClaimLease), Limit: free})
	if err != nil {
		return false, err
	}
	for _, it := range items {
		b.inbox.sem <- struct{}{}
		b.inbox.wg.Go(func() {
			defer func() {
				<-b.inbox.sem
				wake(b.inboxWake)  // the thread may have more
				wake(b.mirrorWake) // replies and run events may be waiting
				b.cfg.Signals.fire()
			}()
			if err := b.processOne(ctx, it); err != nil && ctx.Err() == nil {
				b.log.ErrorContext(ctx, "slack: recording a delivery", slog.String("key", it.Key),
					slog.Int64("inbox_id", it.ID), slog.Any("error", err))
			}
		})
	}
	return false, nil
}

// processOne handles a claimed delivery and records the outcome. The claim
// is extended while the handling runs (a chat turn may take minutes); if it
// is lost anyway (this process was cut off from the database for a whole
// lease and another replica took the delivery over) the handling is
// cancelled, since the other replica does it.
func (b *Bridge) processOne(ctx context.Context, it *store.SlackInboxItem) error {
	if ctx.Err() != nil {
		return b.inboxRelease(ctx, it, time.Now(), nil)
	}
	log := b.log.With(slog.String("key", it.Key), slog.Int64("inbox_id", it.ID), slog.String("thread", it.Thread))
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := b.keepClaim(hctx, cancel, func(ctx context.Context, until time.Time) error {
		return b.store.SlackInboxExtend(ctx, it.ID, it.Claim, until)
	}, log)
	// The delivery's span is the root of what it leads to: a chat turn, an
	// enqueue and its run, a decision, the replies it queues.
	hctx, span := b.startSpan(hctx, tracing.SpanSlackDelivery, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("slack.delivery.kind", it.Kind), attribute.String("slack.delivery.key", it.Key),
			attribute.Int64("slack.delivery.id", it.ID)))
	done, herr := b.handle(hctx, it)
	tracing.Fail(span, "", herr)
	span.End()
	stop()
	if herr != nil && hctx.Err() != nil {
		if context.Cause(hctx) == errClaimLost {
			return nil // the replica that took it over handles it
		}
		// Shutting down: give it back, for another replica or the next start.
		return b.inboxRelease(ctx, it, time.Now(), nil)
	}
	if errors.Is(herr, errNotYet) {
		// Waiting on the outbox (a Slack outage): no failure, no limit.
		return b.inboxRelease(ctx, it, time.Now().Add(b.cfg.InboxRetry), nil)
	}
	if herr != nil {
		n := it.Attempts + 1
		log.ErrorContext(ctx, "slack: delivery failed", slog.Int("attempt", n), slog.Any("error", herr))
		if !errors.Is(herr, errMalformed) && n < inboxAttempts {
			return b.inboxRelease(ctx, it, time.Now().Add(time.Duration(n)*b.cfg.InboxRetry), herr)
		}
	}
	if done {
		return nil
	}
	msg := ""
	if herr != nil {
		msg = herr.Error()
	}
	if err := b.store.SlackInboxDone(context.WithoutCancel(ctx), it.ID, msg); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// errClaimLost cancels work on a delivery or message another replica took
// over.
var errClaimLost = errors.New("claim lost")

// keepClaim calls extend every third of a lease until stop is called, so
// work that takes long keeps its claim; a claim found lost (this process
// was cut off from the database for a whole lease and another replica took
// over) cancels the work.
func (b *Bridge) keepClaim(ctx context.Context, cancel context.CancelCauseFunc, extend func(ctx context.Context, until time.Time) error,
	log *slog.Logger) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(b.cfg.ClaimLease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := extend(ctx, time.Now().Add(b.cfg.ClaimLease))
			switch {
			case errors.Is(err, store.ErrConflict):
				log.WarnContext(ctx, "slack: claim lost to another replica; abandoning the work")
				cancel(errClaimLost)
				return
			case err != nil && ctx.Err() == nil:
				log.WarnContext(ctx, "slack: extending a claim", slog.Any("error", err))
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// inboxRelease gives a claimed delivery back, claimable from next; failure,
// when set, counts as a failed attempt. It is recorded even when ctx is
// done (shutting down), so no other replica waits for the claim to lapse.
func (b *Bridge) inboxRelease(ctx context.Context, it *store.SlackInboxItem, next time.Time, failure error) error {
	p := &store.SlackInboxReleaseParams{ID: it.ID, Claim: it.Claim, Next: next, Failed: failure != nil}
	if failure != nil {
		p.Error = failure.Error()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := b.store.SlackInboxRelease(rctx, p)
	if errors.Is(err, store.ErrConflict) {
		return nil // taken over meanwhile: the new holder has it
	}
	return err
}

// eventThread is the thread an event delivery belongs to, which orders its
// processing; "" (an event that is not a message) makes it a thread of its
// own.
func eventThread(env *Envelope) string {
	if env.Type != "event_callback" {
		return ""
	}
	m := env.Event
	if env.EventErr != nil || m.Channel == "" {
		return ""
	}
	if t := m.Target(); t != nil {
		m = t // a change is handled after what it changes
	}
	if m.ChannelType == "im" && m.ThreadTS == "" {
		return queueOf(m.Channel, dmThread) // one conversation, in order
	}
	return queueOf(m.Channel, m.Root())
}

// eventKey is the inbox key of an event delivery. Slack retries a delivery
// under its event_id, but may also deliver one message as two events with
// different ids (two app_mentions of it, a DM twice). A message is keyed
// by what it is instead (its event type, channel and ts), so the inbox
// stores it once however often it arrives, and what it causes, keyed by the
// delivery (its transcript line, replies, the enqueue), happens once. The
// type stays in the key: a mention's plain message copy must not take the
// app_mention's place.
func eventKey(env *Envelope) string {
	m := env.Event
	if env.Type != "event_callback" || env.EventErr != nil || m.Channel == "" || m.TS == "" || !relevantSubtype(m.Subtype) {
		return env.EventID
	}
	if m.Type != "app_mention" && m.Type != "message" {
		return env.EventID
	}
	return m.Type + ":" + m.Channel + ":" + m.TS
}

// handle processes one delivery; done reports that it already marked the
// delivery processed (in the same transaction as its effect).
func (b *Bridge) handle(ctx context.Context, it *store.SlackInboxItem) (done bool, err error) {
	switch it.Kind {
	case store.SlackKindEvent:
		env, err := ParseEnvelope(it.Body)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errMalformed, err)
		}
		if env.Type != "event_callback" {
			return false, nil
		}
		if env.EventErr != nil {
			return false, fmt.Errorf("%w: %w", errMalformed, env.EventErr)
		}
		m := env.Event
		if b.botUserID.Load().(string) == "" {
			for _, a := range env.Authorizations {
				if a.IsBot && a.UserID != "" {
					b.botUserID.CompareAndSwap("", a.UserID)
				}
			}
		}
		if m.Type == "app_home_opened" {
			return false, b.homeOpened(ctx, it, m.User, m.Tab)
		}
		return b.handleMessage(ctx, it, m)
	case store.SlackKindInteraction:
		in, err := ParseInteraction(it.Body)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errMalformed, err)
		}
		return false, b.handleInteraction(ctx, it, in)
	case store.SlackKindCommand:
		return false, b.handleSlashRun(ctx, it)
	default:
		return false, fmt.Errorf("%w: unknown delivery kind %q", errMalformed, it.Kind)
	}
}

// relevantSubtype reports whether a message subtype carries new text from
// someone (edits, deletions, joins and the like do not).
func relevantSubtype(st string) bool {
	return st == "" || st == "thread_broadcast" || st == "file_share" || st == "bot_message"
}

func (b *Bridge) handleMessage(ctx context.Context, it *store.SlackInboxItem, m *Message) (bool, error) {
	botUser := b.botUserID.Load().(string)
	if m.Subtype == subtypeChanged || m.Subtype == subtypeDeleted {
		return b.handleChange(ctx, it, m)
	}
	if m.Channel == "" || m.TS == "" || !relevantSubtype(m.Subtype) {
		return false, nil
	}
	if m.User != "" && m.User == botUser || m.BotID != "" && m.BotID == b.botID.Load().(string) {
		return false, nil // our own post
	}
	if m.BotID != "" || m.User == "" {
		if !b.cfg.AllowBots || m.BotID == "" {
			return false, nil // other bots only when configured
		}
		if m.User == "" {
			m.User = m.BotID
		}
	}
	log := b.log.With(slog.String("channel", m.Channel), slog.String("ts", m.TS), slog.String("user", m.User))
	switch {
	case m.Type == "app_mention":
		return false, b.handleMention(ctx, it, m, log)
	case m.Type == "message" && m.ChannelType == "im":
		return false, b.handleMention(ctx, it, m, log) // a DM is addressed to the bot
	case m.Type == "message":
		if mentions(m.Text, botUser) {
			return false, nil // the app_mention delivery of the same message handles it
		}
		if m.ThreadTS == "" {
			return false, nil
		}
		ses, err := b.store.SessionGetByTag(ctx, threadTag(m.Channel, m.ThreadTS))
		if errors.Is(err, store.ErrNotFound) {
			return false, nil // not a thread the bot is part of
		}
		if err != nil {
			return false, err
		}
		if refused, err := b.refuseText(ctx, it, m.Channel, m.ThreadTS, m.User, "your message", m.Text); refused || err != nil {
			return false, err
		}
		said := b.said(ctx, m, false)
		said.Text = b.markdown(ctx, m.Text, true)
		_, err = b.store.SlackInboxAppendEvent(ctx, it.ID, appendParams(ses.ID, m.User, said))
		if err != nil {
			return false, err
		}
		log.DebugContext(ctx, "slack: thread message appended", slog.String("session_id", ses.ID))
		return true, nil
	}
	return false, nil
}

// handleChange records an edit or deletion of a message in a thread the
// bot is part of, so the conversation (engine/thread) reads it as Slack
// now shows it; the transcript keeps what was first said. An edit runs no
// command: what a message asked for was done when it was said. The bot's
// own edits (its cards) are not people's words and record nothing.
func (b *Bridge) handleChange(ctx context.Context, it *store.SlackInboxItem, m *Message) (bool, error) {
	t := m.Target()
	if t == nil || t.TS == "" {
		return false, nil
	}
	botUser := b.botUserID.Load().(string)
	user := t.User
	switch {
	case t.BotID != "" && (t.BotID == b.botID.Load().(string) || !b.cfg.AllowBots), user != "" && user == botUser:
		return false, nil
	case user == "":
		user = t.BotID
	}
	if user == "" || m.Subtype == subtypeChanged && m.Previous != nil && m.Previous.Text == t.Text {
		return false, nil // a link preview attached, or no one to name
	}
	root := t.Root()
	if t.ChannelType == "im" && t.ThreadTS == "" {
		root = dmThread
	}
	ses, err := b.store.SessionGetByTag(ctx, threadTag(t.Channel, root))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // not a thread the bot is part of
	}
	if err != nil {
		return false, err
	}
	if m.Subtype == subtypeChanged {
		if refused, err := b.refuseText(ctx, it, t.Channel, t.ThreadTS, user, "your edit", t.Text); refused || err != nil {
			return false, err
		}
	}
	var ev transcript.Event = transcript.MessageDeleted{SlackTS: t.TS}
	if m.Subtype == subtypeChanged {
		ev = transcript.MessageEdited{SlackTS: t.TS, Text: b.markdown(ctx, stripMention(t.Text, botUser), true), Raw: t.Text}
	}
	p := transcript.EncodePtr(ev, actor(user))
	p.SessionID = ses.ID
	if _, err := b.store.SlackInboxAppendEvent(ctx, it.ID, p); err != nil {
		return false, err
	}
	b.log.DebugContext(ctx, "slack: message change recorded", slog.String("session_id", ses.ID),
		slog.String("channel", t.Channel), slog.String("ts", t.TS), slog.String("subtype", m.Subtype))
	return true, nil
}

func actor(user string) string { return "slack:" + user }

// refuseText holds Slack text to the rule every surface keeps (SPEC §7:
// UTF-8 without NUL bytes). A message that breaks it is neither recorded
// nor acted on: the sender is told why, in the thread, and only they see
// it. refused reports that text broke the rule. A delivery that is not
// UTF-8 is refused as a whole: its JSON decoded with U+FFFD in place of
// the bytes, so text no longer shows where they were.
func (b *Bridge) refuseText(ctx context.Context, it *store.SlackInboxItem, channel, threadTS, user, what, text string) (refused bool, err error) {
	bad := store.CheckText(what, text, 0)
	if bad == nil && !utf8.Valid(it.Body) {
		bad = store.Refuse(store.ErrInvalid, "%s is not valid UTF-8", what)
	}
	if bad == nil {
		return false, nil
	}
	return true, b.ephemeral(ctx, it, "badtext", channel, threadTS, user, refusedText(bad))
}

// refusedText is what a sender is told of text the bridge refused.
func refusedText(err error) string {
	return ":warning: I did nothing with that: " + store.ReasonOf(err) + ". Please send it again as plain text."
}

// reply queues a bridge-authored line in the delivery's thread; its dedupe
// key derives from the delivery, so reprocessing never posts it twice.
func (b *Bridge) reply(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, text string) error {
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{
		DedupeKey: "reply:" + it.Key + ":" + suffix, Queue: queueOf(channel, threadTS),
		Method: store.SlackPost, Channel: channel, ThreadTS: postTS(threadTS), Text: text,
	})
}

// answer is reply for the bridge's answer to a mention in a session's
// thread: it is kept in the session too (as markdown, marked posted, so
// the mirror does not post it again), as a console command's answer is,
// so the transcript and the conversation a model reads hold both sides.
// Both writes are keyed by the delivery: a replay after a crash makes
// each once.
func (b *Bridge) answer(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, sessionID, text string) error {
	if err := b.reply(ctx, it, suffix, channel, threadTS, text); err != nil {
		return err
	}
	p := transcript.EncodePtr(transcript.AssistantMessage{Text: b.markdown(ctx, text, false), Posted: true}, "holdfast")
	p.SessionID = sessionID
	if _, err := b.store.SlackEventAppendOnce(ctx, it.Key, p); err != nil {
		return fmt.Errorf("record the answer: %w", err)
	}
	return nil
}

// ephemeral queues a line only user sees.
func (b *Bridge) ephemeral(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, user, text string) error {
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{
		DedupeKey: "eph:" + it.Key + ":" + suffix, Queue: queueOf(channel, threadTS),
		Method: store.SlackEphemeral, Channel: channel, ThreadTS: postTS(threadTS), User: user, Text: text,
	})
}
