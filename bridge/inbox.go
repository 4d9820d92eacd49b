package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

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

// processInbox handles stored deliveries in arrival order. Each is marked
// processed once handled; one whose handling fails is tried again on a
// later pass (the next wake-up or tick), and after inboxAttempts marked with
// its error rather than retried forever.
func (b *Bridge) processInbox(ctx context.Context) (bool, error) {
	items, err := b.store.SlackInboxPending(ctx, inboxBatch)
	if err != nil {
		return false, err
	}
	retrying := false
	for _, it := range items {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		done, err := b.handle(ctx, it)
		if err != nil && ctx.Err() != nil {
			return false, ctx.Err() // shutting down: leave it for the next start
		}
		if err != nil {
			b.inboxFails[it.ID]++
			b.log.ErrorContext(ctx, "slack: delivery failed", slog.String("key", it.Key), slog.Int("attempt", b.inboxFails[it.ID]), slog.Any("error", err))
			if !errors.Is(err, errMalformed) && b.inboxFails[it.ID] < inboxAttempts {
				retrying = true
				continue
			}
		}
		delete(b.inboxFails, it.ID)
		if !done {
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if err := b.store.SlackInboxDone(ctx, it.ID, msg); err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
		}
	}
	if len(items) > 0 {
		wake(b.mirrorWake) // replies and run events may be waiting
	}
	return len(items) == inboxBatch && !retrying, nil
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
		return b.handleMessage(ctx, it, m)
	case store.SlackKindInteraction:
		in, err := ParseInteraction(it.Body)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errMalformed, err)
		}
		return false, b.handleInteraction(ctx, it, in)
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
		_, err = b.store.SlackInboxAppendEvent(ctx, it.ID, &store.EventAppendParams{
			SessionID: ses.ID, Type: "user_message", Actor: actor(m.User),
			Payload: map[string]any{"text": unescape(m.Text), "user": m.User, "channel": m.Channel, "ts": m.TS, "mention": false},
		})
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
		Method: store.SlackPost, Channel: channel, ThreadTS: threadTS, Text: text,
	})
}

// ephemeral queues a line only user sees.
func (b *Bridge) ephemeral(ctx context.Context, it *store.SlackInboxItem, suffix, channel, threadTS, user, text string) error {
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{
		DedupeKey: "eph:" + it.Key + ":" + suffix, Queue: queueOf(channel, threadTS),
		Method: store.SlackEphemeral, Channel: channel, ThreadTS: threadTS, User: user, Text: text,
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
