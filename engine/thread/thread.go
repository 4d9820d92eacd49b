// Package thread reads a session's conversation as its participants wrote
// it: the Thread load class of workflows (SPEC §4.1) and the transcript a
// chat turn gives the model (SPEC §3) both come from here, so they name
// speakers and order messages alike.
//
// A conversation is the session's user_message and assistant_message
// events. Messages a Slack thread held before the bot joined it are
// recorded later than the mention that bound the thread (the backfill of
// SPEC §5 fetches them after, or while, the mention is handled), each
// marked backfilled with its Slack ts; they are earlier in the conversation
// than everything recorded live, so they come first, in Slack's order, and
// the live messages follow in the order they were recorded.
package thread

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Bounds of a loaded thread (SPEC §4.1).
const (
	MaxMessages = 200
	MaxChars    = 50_000
	// MaxBackfill bounds the messages one thread backfill records: the
	// bridge stops there, and Load relies on it to find the newest
	// MaxMessages among backfilled and live messages in one read.
	MaxBackfill = 1_000
)

// BotSpeaker names the bot's own messages.
const BotSpeaker = "Holdfast"

// Load reads the conversation of session id, oldest first: at most the
// newest MaxMessages messages, and of those the newest whose text fits in
// MaxChars (a newest message longer than that alone is cut). A run with no
// session ("") has an empty conversation.
func Load(ctx context.Context, st store.Store, id string) ([]workflow.ThreadMessage, error) {
	out := []workflow.ThreadMessage{}
	if id == "" {
		return out, nil
	}
	evs, err := Events(ctx, st, id, MaxMessages)
	if err != nil {
		return nil, err
	}
	names := NewNames(st)
	texts, saids := make([]string, len(evs)), make([]transcript.Said, len(evs))
	for i, e := range evs {
		texts[i], saids[i], _ = message(e)
	}
	total := 0
	first := len(evs)
	for i := len(evs) - 1; i >= 0; i-- {
		n := utf8.RuneCountInString(texts[i])
		if total+n > MaxChars && i < len(evs)-1 {
			break
		}
		total += n
		first = i
	}
	for i := first; i < len(evs); i++ {
		t := texts[i]
		if utf8.RuneCountInString(t) > MaxChars {
			t = string([]rune(t)[:MaxChars-1]) + "…"
		}
		out = append(out, workflow.ThreadMessage{Speaker: names.speaker(ctx, evs[i], saids[i]), Text: t, TS: saidAt(evs[i], saids[i])})
	}
	return out, nil
}

// Events reads the newest limit (at most MaxMessages) messages of a
// session in conversation order (see the package comment), leaving out
// messages with no text.
func Events(ctx context.Context, st store.Store, id string, limit int) ([]*store.Event, error) {
	limit = min(max(limit, 1), MaxMessages)
	types := []string{transcript.TypeUserMessage, transcript.TypeAssistantMessage}
	evs, err := st.EventList(ctx, &store.EventListParams{SessionID: id, Types: types, Newest: true, Limit: limit})
	if err != nil {
		return nil, err
	}
	// Edits and deletions are read apart, so they take no message's place
	// in the limit; the newest of them are the ones that can touch it.
	changes, err := st.EventList(ctx, &store.EventListParams{SessionID: id, Newest: true, Limit: limit + MaxBackfill,
		Types: []string{transcript.TypeMessageEdited, transcript.TypeMessageDeleted}})
	if err != nil {
		return nil, err
	}
	if len(evs) == limit && slices.ContainsFunc(evs, Backfilled) {
		// Backfilled messages recorded late stand among the newest by record
		// time though they are the oldest of the conversation: read enough
		// to hold the newest limit live messages whatever the backfill holds.
		if evs, err = st.EventList(ctx, &store.EventListParams{SessionID: id, Types: types, Newest: true, Limit: limit + MaxBackfill}); err != nil {
			return nil, err
		}
	}
	evs = Order(append(evs, changes...))
	if len(evs) > limit {
		evs = evs[len(evs)-limit:]
	}
	return evs, nil
}

// Order puts events (in record order) in conversation order: backfilled
// messages first by their Slack ts, then the rest as recorded. A message
// its speaker edited reads as last edited, and one they deleted is left
// out, as are messages with no text and the edit events themselves; other
// events are kept.
func Order(evs []*store.Event) []*store.Event {
	evs = applyChanges(evs)
	var back, live []*store.Event
	at := map[*store.Event]time.Time{}
	for _, e := range evs {
		t, said, ok := message(e)
		if ok && strings.TrimSpace(t) == "" {
			continue
		}
		if said.Backfilled {
			back = append(back, e)
			at[e] = saidAt(e, said)
		} else {
			live = append(live, e)
		}
	}
	slices.SortStableFunc(back, func(a, b *store.Event) int { return at[a].Compare(at[b]) })
	return append(back, live...)
}

// applyChanges answers evs with message_edited and message_deleted taken
// out and applied, by Slack ts and speaker, to the messages they change:
// the latest edit's text in place of the first (a copy: the caller's
// events are not touched), a deleted message left out. Only its speaker
// changes a message, as only they can in Slack.
func applyChanges(evs []*store.Event) []*store.Event {
	type key struct{ ts, actor string }
	var changes map[key]*store.Event
	for _, e := range evs {
		if e.Type != transcript.TypeMessageEdited && e.Type != transcript.TypeMessageDeleted {
			continue
		}
		ts, _ := e.Payload["ts"].(string)
		if ts == "" {
			continue
		}
		if changes == nil {
			changes = map[key]*store.Event{}
		}
		// A deletion is final; of edits, the latest recorded counts.
		k := key{ts, e.Actor}
		if cur := changes[k]; cur == nil || cur.Type != transcript.TypeMessageDeleted && (e.ID > cur.ID || e.Type == transcript.TypeMessageDeleted) {
			changes[k] = e
		}
	}
	if changes == nil {
		return evs
	}
	out := make([]*store.Event, 0, len(evs))
	for _, e := range evs {
		if e.Type == transcript.TypeMessageEdited || e.Type == transcript.TypeMessageDeleted {
			continue
		}
		if _, said, ok := message(e); ok && said.SlackTS != "" {
			if c := changes[key{said.SlackTS, e.Actor}]; c != nil {
				if c.Type == transcript.TypeMessageDeleted {
					continue
				}
				edited := *e
				edited.Payload = maps.Clone(e.Payload)
				edited.Payload["text"], edited.Payload["edited"] = c.Payload["text"], true
				e = &edited
			}
		}
		out = append(out, e)
	}
	return out
}

// message answers the text of a user or assistant message and who said
// it; ok is false for other events. A wrongly typed key reads as empty.
func message(e *store.Event) (text string, said transcript.Said, ok bool) {
	text, said, ok, err := transcript.MessageOf(e)
	if err != nil {
		slog.Debug("thread: message read with fields left empty", slog.Int64("event_id", e.ID),
			slog.String("session_id", e.SessionID), slog.Any("error", err))
	}
	return text, said, ok
}

// Backfilled reports whether e was recorded by a thread backfill.
func Backfilled(e *store.Event) bool {
	_, said, _ := message(e)
	return said.Backfilled
}

func text(e *store.Event) string {
	t, _, _ := message(e)
	return t
}

// SaidAt is when a message was said: its Slack ts when it has one, else
// when it was recorded.
func SaidAt(e *store.Event) time.Time {
	_, said, _ := message(e)
	return saidAt(e, said)
}

func saidAt(e *store.Event, said transcript.Said) time.Time {
	if ts := said.SlackTS; ts != "" {
		if t, ok := ParseSlackTS(ts); ok {
			return t
		}
	}
	return e.TS
}

// ParseSlackTS reads a Slack ts ("<seconds>.<microseconds>").
func ParseSlackTS(ts string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, false
	}
	var us int64
	if frac != "" {
		frac = (frac + "000000")[:6]
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(s, us*1000).UTC(), true
}

// Lines is a conversation as `Speaker: text` lines, the body of the
// Thread load's Context entry.
func Lines(msgs []workflow.ThreadMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Speaker)
		b.WriteString(": ")
		b.WriteString(m.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Names resolves speakers, asking the store at most once per actor.
type Names struct {
	st   store.Store
	seen map[string]string
}

// NewNames returns a resolver over st.
func NewNames(st store.Store) *Names { return &Names{st: st, seen: map[string]string{}} }

// Speaker names who said e: the name recorded with it, else the bot for
// its own messages, else the actor's name as the store knows it (a cached
// Slack display name, a console username), else the actor as recorded.
func (n *Names) Speaker(ctx context.Context, e *store.Event) string {
	_, said, _ := message(e)
	return n.speaker(ctx, e, said)
}

func (n *Names) speaker(ctx context.Context, e *store.Event, said transcript.Said) string {
	if strings.TrimSpace(said.Speaker) != "" {
		return said.Speaker
	}
	if e.Type == transcript.TypeAssistantMessage {
		return BotSpeaker
	}
	if s, ok := n.seen[e.Actor]; ok {
		return s
	}
	s := n.lookup(ctx, e.Actor)
	n.seen[e.Actor] = s
	return s
}

func (n *Names) lookup(ctx context.Context, actor string) string {
	kind, id, _ := strings.Cut(actor, ":")
	switch kind {
	case "slack":
		if u, err := n.st.SlackUserGet(ctx, id); err == nil && u.Name != "" {
			return u.Name
		}
		return id // not cached (or unreadable): the Slack id still tells people apart
	case "user":
		if u, err := n.st.UserGetByID(ctx, id); err == nil {
			return u.Username
		}
	case "engine", "holdfast":
		return BotSpeaker
	case "":
		return "someone"
	}
	return actor
}
