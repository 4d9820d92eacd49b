package web

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"github.com/holdfast-bot/holdfast/store"
)

// Permalinker answers the permalink of a Slack message (chat.getPermalink).
// The console has no Slack client of its own; serve passes the bridge's.
// Nil means no Slack: pages show no thread links.
type Permalinker interface {
	Permalink(ctx context.Context, channel, ts string) (string, error)
}

// permalinkTimeout bounds the Slack call a page render may wait for; a
// slow Slack costs a missing link, never a slow page.
const permalinkTimeout = 2 * time.Second

// permalinkCacheSize bounds the cache (a thread's permalink never changes).
const permalinkCacheSize = 4096

// permalinks caches Slack thread permalinks by "channel|ts". Failures are
// not cached, so a link appears once Slack answers.
type permalinks struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *permalinks) get(key string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[key]
	return v, ok
}

func (p *permalinks) put(key, v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= permalinkCacheSize {
		p.m = map[string]string{} // crude, but a thread link is cheap to ask for again
	}
	p.m[key] = v
}

// slackThread finds a session's Slack thread from its tags
// ("slack:<channel>:<thread_ts>"); DM sessions ("slack:<channel>:dm") have
// no single thread.
func slackThread(s *store.Session) (channel, ts string, ok bool) {
	for _, t := range s.Tags {
		rest, found := strings.CutPrefix(t, "slack:")
		if !found {
			continue
		}
		ch, thread, found := strings.Cut(rest, ":")
		if found && ch != "" && thread != "" && thread != "dm" {
			return ch, thread, true
		}
	}
	return "", "", false
}

// slackURL answers the session's Slack thread permalink, or "".
func (c *Console) slackURL(ctx context.Context, s *store.Session) templ.SafeURL {
	if c.Slack == nil || s == nil {
		return ""
	}
	ch, ts, ok := slackThread(s)
	if !ok {
		return ""
	}
	key := ch + "|" + ts
	if v, ok := c.links.get(key); ok {
		return templ.SafeURL(v)
	}
	ctx, cancel := context.WithTimeout(ctx, permalinkTimeout)
	defer cancel()
	link, err := c.Slack.Permalink(ctx, ch, ts)
	if err != nil || !strings.HasPrefix(link, "https://") {
		c.Log.WarnContext(ctx, "slack permalink", slog.String("channel", ch), slog.String("ts", ts), slog.Any("error", err))
		return ""
	}
	c.links.put(key, link)
	return templ.SafeURL(link)
}

// sessionSlackURL is slackURL for a session known by id.
func (c *Console) sessionSlackURL(ctx context.Context, sessionID string) templ.SafeURL {
	if c.Slack == nil || sessionID == "" {
		return ""
	}
	s, err := c.Store.SessionGetByID(ctx, sessionID)
	if err != nil {
		return ""
	}
	return c.slackURL(ctx, s)
}
