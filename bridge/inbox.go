package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

// inboxBatch is how many deliveries one pass reads.
const inboxBatch = 50

// inboxAttempts is how often a delivery whose handling fails (a busy
// database, a failing engine call) is tried before it is set aside with its
// error.
const inboxAttempts = 3

// errMalformed marks deliveries no retry can help.
var errMalformed = errors.New("malformed delivery")

// processInbox hands stored deliveries to per-thread workers: threads run
// in parallel (so one slow command, such as /compact on a hosted model,
// holds up only its own thread), each thread's deliveries in arrival order.
// It never waits for the workers; a worker that finishes wakes it again.
// A delivery whose handling fails is tried again after a pause (the rest of
// its thread waits for it), and after inboxAttempts it is marked with its
// error rather than retried forever.
func (b *Bridge) processInbox(ctx context.Context) (bool, error) {
	items, err := b.store.SlackInboxPending(ctx, inboxBatch)
	if err != nil {
		return false, err
	}
	now := time.Now()
	var order []string
	threads := map[string][]*store.SlackInboxItem{}
	blocked := map[string]bool{}
	b.inbox.mu.Lock()
	for _, it := range items {
		k := threadOf(it)
		if b.inbox.busy[k] || blocked[k] {
			continue // a worker is on it (and wakes us when done), or it waits for a retry
		}
		if f, ok := b.inbox.fails[it.ID]; ok && now.Before(f.next) {
			blocked[k] = true // the thread waits for its failed delivery's retry
			continue
		}
		if _, ok := threads[k]; !ok {
			order = append(order, k)
		}
		threads[k] = append(threads[k], it)
	}
	for _, k := range order {
		b.inbox.busy[k] = true
	}
	b.inbox.mu.Unlock()

	for _, k := range order {
		select {
		case b.inbox.sem <- struct{}{}:
		case <-ctx.Done():
			b.inbox.mu.Lock()
			for _, k := range order {
				delete(b.inbox.busy, k)
			}
			b.inbox.mu.Unlock()
			return false, ctx.Err()
		}
		b.inbox.wg.Go(func() {
			defer func() {
				<-b.inbox.sem
				b.inbox.mu.Lock()
				delete(b.inbox.busy, k)
				b.inbox.mu.Unlock()
				wake(b.inboxWake)  // the thread may have more
				wake(b.mirrorWake) // replies and run events may be waiting
				b.cfg.Signals.fire()
			}()
			for _, it := range threads[k] {
				retry, err := b.processOne(ctx, it)
				if err != nil && ctx.Err() == nil {
					b.log.ErrorContext(ctx, "slack: recording a delivery", slog.String("key", it.Key), slog.Any("error", err))
				}
				if err != nil || retry {
					return // the rest of the thread waits for it
				}
			}
		})
	}
	return false, nil
}

// processOne handles a delivery and records the outcome; retry reports that
// it failed and will be tried again.
func (b *Bridge) processOne(ctx context.Context, it *store.SlackInboxItem) (retry bool, err error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	// The delivery's span is the root of what it leads to: a chat turn, an
	// enqueue and its run, a decision, the replies it queues.
	ctx, span := b.startSpan(ctx, tracing.SpanSlackDelivery, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("slack.delivery.kind", it.Kind), attribute.String("slack.delivery.key", it.Key),
			attribute.Int64("slack.delivery.id", it.ID)))
	defer span.End()
	done, herr := b.handle(ctx, it)
	tracing.Fail(span, "", herr)
	if herr != nil && ctx.Err() != nil {
		return false, ctx.Err() // shutting down: leave it for the next start
	}
	b.inbox.mu.Lock()
	f := b.inbox.fails[it.ID]
	if errors.Is(herr, errNotYet) {
		// Waiting on the outbox (a Slack outage): no failure, no limit.
		f.next = time.Now().Add(b.cfg.InboxRetry)
		b.inbox.fails[it.ID] = f
		b.inbox.mu.Unlock()
		return true, nil
	}
	if herr != nil {
		f.n++
		f.next = time.Now().Add(time.Duration(f.n) * b.cfg.InboxRetry)
		b.inbox.fails[it.ID] = f
	}
	if herr == nil || errors.Is(herr, errMalformed) || f.n >= inboxAttempts {
		delete(b.inbox.fails, it.ID)
	}
	b.inbox.mu.Unlock()
	if herr != nil {
		b.log.ErrorContext(ctx, "slack: delivery failed", slog.String("key", it.Key), slog.Int("attempt", f.n), slog.Any("error", herr))
		if !errors.Is(herr, errMalformed) && f.n < inboxAttempts {
			return true, nil
		}
	}
	if done {
		return false, nil
	}
	msg := ""
	if herr != nil {
		msg = herr.Error()
	}
	if err := b.store.SlackInboxDone(ctx, it.ID, msg); err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	return false, nil
}

// threadOf is the thread a delivery belongs to, which orders its processing;
// a delivery that does not parse is a thread of its own.
func threadOf(it *store.SlackInboxItem) string {
	switch it.Kind {
	case store.SlackKindEvent:
		if env, err := ParseEnvelope(it.Body); err == nil {
			if m, err := ParseMessage(env); err == nil && m.Channel != "" {
				if m.ChannelType == "im" && m.ThreadTS == "" {
					return queueOf(m.Channel, dmThread) // one conversation, in order
				}
				return queueOf(m.Channel, m.Root())
			}
		}
	case store.SlackKindInteraction:
		if in, err := ParseInteraction(it.Body); err == nil {
			return interactionThread(in)
		}
	case store.SlackKindCommand:
		return "command:" + it.Key
	}
	return fmt.Sprintf("delivery:%d", it.ID)
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
		m, err := ParseMessage(env)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errMalformed, err)
		}
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

func actor(user string) string { return "slack:" + user }

// reply queues a bridge-authored line in the delivery's thread; its dedupe
// key derives from the delivery, so reprocessing never posts it twice.
func (b *Bridge) reply(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, text string) error {
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{
		DedupeKey: "reply:" + it.Key + ":" + suffix, Queue: queueOf(channel, threadTS),
		Method: store.SlackPost, Channel: channel, ThreadTS: postTS(threadTS), Text: text,
	})
}

// ephemeral queues a line only user sees.
func (b *Bridge) ephemeral(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, user, text string) error {
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{
		DedupeKey: "eph:" + it.Key + ":" + suffix, Queue: queueOf(channel, threadTS),
		Method: store.SlackEphemeral, Channel: channel, ThreadTS: postTS(threadTS), User: user, Text: text,
	})
}

func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if r := []rune(s); len(r) > n {
		s = strings.TrimSpace(string(r[:n-1])) + "…"
	}
	return s
}
