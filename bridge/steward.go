package bridge

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/store"
)

// stewardship is the bridge's state for deciding in Slack (issue 10): the
// caches of user names and permalinks, the workspace's URL and the signal
// that the outbox sent something.
type stewardship struct {
	links struct {
		mu sync.Mutex
		m  map[string]string
	}
	// teamURL is the workspace URL auth.test answered ("https://x.slack.com/").
	teamURL atomic.Value
	sent    struct {
		mu sync.Mutex
		c  chan struct{}
	}
}

// dmThread is the thread part of a DM's conversation tag,
// slack:<channel>:dm (SPEC §3): a DM's top-level messages are one session,
// answered at top level.
const dmThread = "dm"

// postTS is the thread_ts of a post into a session's thread: none for a
// DM's top-level conversation.
func postTS(thread string) string {
	if thread == dmThread {
		return ""
	}
	return thread
}

// isDM reports whether a channel id is a direct message's (D…).
func isDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// threadOfMessage is the session thread of a message: its own thread, or
// for a top-level message in a DM the DM's one conversation.
func threadOfMessage(channel, ts, threadTS string) string {
	if threadTS != "" {
		return threadTS
	}
	if isDM(channel) {
		return dmThread
	}
	return ts
}

// maxCached bounds each cache (permalinks, user names).
const maxCached = 10000

// permalinkLookup bounds a chat.getPermalink call; a link that cannot be
// had in time is built from the workspace URL instead.
const permalinkLookup = 1500 * time.Millisecond

// permalink answers a link to the message ts in channel (a thread's root
// links the thread): chat.getPermalink, cached; when Slack does not answer,
// the archive link built from the workspace URL (not cached); "" when
// neither is known.
func (b *Bridge) permalink(ctx context.Context, channel, ts string) string {
	if channel == "" || ts == "" {
		return ""
	}
	if ts == dmThread {
		return b.archiveURL(channel, "")
	}
	key := channel + ":" + ts
	b.links.mu.Lock()
	link, ok := b.links.m[key]
	b.links.mu.Unlock()
	if ok {
		return link
	}
	lctx, cancel := context.WithTimeout(ctx, permalinkLookup)
	defer cancel()
	link, err := b.api.GetPermalinkContext(lctx, &slack.PermalinkParameters{Channel: channel, Ts: ts})
	if err != nil || link == "" {
		b.log.WarnContext(ctx, "slack: chat.getPermalink failed; linking the archive instead", slog.String("channel", channel),
			slog.String("ts", ts), slog.Any("error", err))
		return b.archiveURL(channel, ts)
	}
	b.links.mu.Lock()
	if b.links.m == nil || len(b.links.m) >= maxCached {
		b.links.m = map[string]string{} // bounded: start over rather than grow for good
	}
	b.links.m[key] = link
	b.links.mu.Unlock()
	return link
}

// archiveURL is Slack's archive link of a channel or a message in it.
func (b *Bridge) archiveURL(channel, ts string) string {
	base, _ := b.teamURL.Load().(string)
	if base == "" {
		return ""
	}
	u := strings.TrimRight(base, "/") + "/archives/" + channel
	if ts != "" {
		u += "/p" + strings.Replace(ts, ".", "", 1)
	}
	return u
}

// sentWait answers a channel closed the next time the outbox records a
// message's outcome: sent, or refused for good.
func (b *Bridge) sentWait() <-chan struct{} {
	b.sent.mu.Lock()
	defer b.sent.mu.Unlock()
	if b.sent.c == nil {
		b.sent.c = make(chan struct{})
	}
	return b.sent.c
}

func (b *Bridge) sentNotify() {
	b.sent.mu.Lock()
	defer b.sent.mu.Unlock()
	if b.sent.c != nil {
		close(b.sent.c)
		b.sent.c = nil
	}
}

// holdPlace is the thread a hold's run came from: its channel and thread
// ("dm" for a DM's conversation); ok is false for a hold from elsewhere.
func (b *Bridge) holdPlace(ctx context.Context, h *store.Hold) (channel, thread string, ok bool) {
	if h.SessionID == "" {
		return "", "", false
	}
	s, err := b.store.SessionGetByID(ctx, h.SessionID)
	if err != nil {
		return "", "", false
	}
	for _, t := range s.Tags {
		if channel, thread, ok := parseTag(t); ok {
			return channel, thread, true
		}
	}
	return "", "", false
}

// tell queues a line for user alone: an ephemeral in channel's thread, or,
// with no channel (a click in the App Home on a hold from no thread), a
// message in the user's DM with the app. key makes it once.
func (b *Bridge) tell(ctx context.Context, key, channel, thread, user, text string) error {
	if channel == "" {
		return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{DedupeKey: "dm:" + key, Queue: queueOf(user, dmThread),
			Method: store.SlackPost, Channel: user, Text: text})
	}
	return b.enqueueOutbox(ctx, &store.SlackOutboxAddParams{DedupeKey: "eph:" + key, Queue: queueOf(channel, thread),
		Method: store.SlackEphemeral, Channel: channel, ThreadTS: postTS(thread), User: user, Text: text})
}

// requester names who asked for a hold's run as Slack shows them: a Slack
// user as a mention, a console user by name.
func (b *Bridge) requester(ctx context.Context, owner string) string {
	switch kind, id, _ := strings.Cut(owner, ":"); kind {
	case "slack":
		return "<@" + id + ">"
	case "user":
		if u, err := b.store.UserGetByID(ctx, id); err == nil {
			return "*" + esc(u.Username) + "* (console)"
		}
		return "a console user"
	case "key":
		return esc(b.keyName(ctx, id))
	case "cli":
		return "the command line"
	case "":
		return ""
	}
	return esc(owner)
}
