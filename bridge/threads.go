package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/engine/thread"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Reading threads (SPEC §3, §5): who is speaking, and what a thread said
// before the bot was in it.
//
// Speakers: Slack users are named by their display name, asked of
// users.info once and cached in the store (refreshed after
// userNameTTL); a name that cannot be had now is left out of the message,
// and readers fall back to the cache or the user id (thread.Names).
//
// Backfill: when a mention inside a thread that already had messages binds
// the thread to a new session, the thread's earlier messages are fetched
// with conversations.replies, a page at a time, and recorded oldest first
// as user_message events with backfilled: true (the bot's own messages as
// assistant_message). The fetch is a store row (store.SlackBackfill) whose
// cursor moves with each recorded page in that page's transaction, so a
// crash, a redelivery or a second replica neither loses nor repeats a
// message. The mention waits for it at most Config.BackfillWait before it is
// answered with what has been recorded; a rate limit (429 Retry-After;
// Slack allows non-Marketplace apps as little as one call a minute, 15
// messages a page) or an outage leaves the rest to the backfill worker,
// which goes on when Slack allows, without holding up anything else.

// userNameTTL is how long a cached Slack name is used before users.info is
// asked again.
const userNameTTL = 24 * time.Hour

// userInfoTimeout bounds one users.info call: a message is recorded without
// its speaker's name rather than wait on Slack.
const userInfoTimeout = 2 * time.Second

// userName is the display name of a Slack user ("" when it cannot be had
// within ctx): the cached one (in the store, shared by replicas) while
// fresh, else users.info's (cached). A stale cached name still serves when
// Slack does not answer, and is all that is asked for without fetch.
func (b *Bridge) userName(ctx context.Context, user string, fetch bool) string {
	if user == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, userInfoTimeout)
	defer cancel()
	cached, err := b.store.SlackUserGet(ctx, user)
	if err == nil && (time.Since(cached.FetchedAt) < userNameTTL || !fetch) {
		return cached.Name
	}
	if !fetch {
		return ""
	}
	stale := ""
	if err == nil {
		stale = cached.Name
	}
	u, err := b.api.GetUserInfoContext(ctx, user)
	if err != nil {
		if ctx.Err() == nil {
			b.log.WarnContext(ctx, "slack: users.info failed; naming the speaker later", slog.String("user", user), slog.Any("error", err))
		}
		return stale
	}
	name := displayName(u)
	if err := b.store.SlackUserPut(context.WithoutCancel(ctx), &store.SlackUser{ID: user, Name: name, FetchedAt: time.Now()}); err != nil {
		b.log.WarnContext(ctx, "slack: caching a user's name", slog.String("user", user), slog.Any("error", err))
	}
	return name
}

// displayName is what Slack shows for u: the display name, else the real
// name, else the handle, else the id.
func displayName(u *slack.User) string {
	for _, n := range []string{u.Profile.DisplayName, u.Profile.RealName, u.RealName, u.Name} {
		if n = strings.TrimSpace(n); n != "" {
			return n
		}
	}
	return u.ID
}

// backfillState is the backfill worker's: which sessions are being fetched
// in this process, and when conversations.replies may be called again.
type backfillState struct {
	mu        sync.Mutex
	busy      map[string]bool
	notBefore time.Time
	wake      chan struct{}
}

func (s *backfillState) init() {
	s.busy = map[string]bool{}
	s.wake = make(chan struct{}, 1)
}

// claim marks sessionID as being fetched here; false when it already is.
func (s *backfillState) claim(sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[sessionID] {
		return false
	}
	s.busy[sessionID] = true
	return true
}

func (s *backfillState) isBusy(sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[sessionID]
}

func (s *backfillState) release(sessionID string) {
	s.mu.Lock()
	delete(s.busy, sessionID)
	s.mu.Unlock()
}

func (s *backfillState) limitedUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notBefore
}

func (s *backfillState) limit(until time.Time) {
	s.mu.Lock()
	if until.After(s.notBefore) {
		s.notBefore = until
	}
	s.mu.Unlock()
}

// createsThreadSession reports whether m, a mention or a shortcut's
// submission, is inside a thread that already had messages and bound it to
// ses: the session records the message that created it.
func createsThreadSession(ses *store.Session, m *Message) bool {
	return m.ThreadTS != "" && m.ThreadTS != dmThread && m.ThreadTS != m.TS && fmt.Sprint(ses.Context[contextMessageTS]) == m.TS
}

// contextMessageTS is the session context key of the ts of the message
// that bound a thread to its session.
const contextMessageTS = "messageTs"

// backfillThread starts the backfill of the messages before before in a
// thread session m created (or, replayed, finds it started) and waits for
// it until ctx's deadline; the backfill worker finishes what is left.
func (b *Bridge) backfillThread(ctx context.Context, ses *store.Session, m *Message, before string, log *slog.Logger) {
	if !createsThreadSession(ses, m) {
		return
	}
	bf, err := b.store.SlackBackfillAdd(ctx, &store.SlackBackfillAddParams{SessionID: ses.ID, Channel: m.Channel, ThreadTS: m.ThreadTS, Before: before})
	if err != nil {
		log.WarnContext(ctx, "slack: could not start the thread backfill; answering without it", slog.Any("error", err))
		return
	}
	if bf.Done {
		return
	}
	if !b.backfill(ctx, bf) {
		log.InfoContext(ctx, "slack: answering the mention; the thread backfill goes on in the background")
		wake(b.backfills.wake)
	}
}

// backfillLoop runs due backfills until ctx is done: each in turn, as far as
// Slack's rate limit allows, then sleeps until the next is due, a wake-up or
// the safety-net tick.
func (b *Bridge) backfillLoop(ctx context.Context) {
	for ctx.Err() == nil {
		due, err := b.store.SlackBackfillDue(ctx, time.Now(), 20)
		if err != nil && ctx.Err() == nil {
			b.log.ErrorContext(ctx, "slack: listing due thread backfills", slog.Any("error", err))
		}
		busy := false
		for _, bf := range due {
			if time.Now().Before(b.backfills.limitedUntil()) {
				break
			}
			if !b.backfill(ctx, bf) && b.backfills.isBusy(bf.SessionID) {
				busy = true // a mention is fetching it; it wakes us when it stops
			}
		}
		b.cfg.Signals.fire()
		wait := b.cfg.Tick
		if next, err := b.store.SlackBackfillNextDue(ctx); err == nil && !busy {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		if until := time.Until(b.backfills.limitedUntil()); until > 0 {
			wait = max(wait, until) // nothing may be fetched before then
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-b.backfills.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// backfillPage bounds the messages one conversations.replies call asks
// for; Slack may answer fewer (15 for non-Marketplace apps).
func (b *Bridge) backfillPage() int { return b.cfg.BackfillPageSize }

// backfill fetches and records bf's pages until it is done (true), ctx ends,
// Slack refuses for now (a 429, an outage: the row says when to try again)
// or another worker has it (false).
func (b *Bridge) backfill(ctx context.Context, bf *store.SlackBackfill) bool {
	if !b.backfills.claim(bf.SessionID) {
		return false // the other worker in this process has it
	}
	defer b.backfills.release(bf.SessionID)
	log := b.log.With(slog.String("session_id", bf.SessionID), slog.String("channel", bf.Channel), slog.String("thread_ts", bf.ThreadTS))
	for !bf.Done {
		if time.Now().Before(b.backfills.limitedUntil()) {
			return false // Slack asked us to wait; the worker goes on when it may
		}
		msgs, more, next, err := b.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: bf.Channel, Timestamp: bf.ThreadTS, Cursor: bf.Cursor, Latest: bf.Before, Limit: b.backfillPage()})
		if err != nil {
			if ctx.Err() != nil {
				return false // the mention's wait is over (or shutdown): the worker goes on
			}
			var se slack.SlackErrorResponse
			if errors.As(err, &se) && (se.Err == "thread_not_found" || !transientSlackErrors[se.Err] && bf.Attempts+1 >= b.cfg.MaxRefusals) {
				log.WarnContext(ctx, "slack: thread backfill given up", slog.Int("fetched", bf.Fetched), slog.Any("error", err))
				return b.backfillDone(ctx, bf, log)
			}
			at, _ := b.retryAt(&store.SlackOutboxMsg{Attempts: bf.Attempts}, err)
			var rl *slack.RateLimitedError
			if errors.As(err, &rl) {
				b.backfills.limit(at)
			}
			log.WarnContext(ctx, "slack: thread backfill page failed; will retry", slog.Time("next", at), slog.Any("error", err))
			b.backfillRetry(ctx, bf, at, err.Error())
			return false
		}
		events := b.backfillEvents(ctx, bf, msgs)
		// A thread longer than MaxBackfill keeps its first messages: pages
		// come oldest first, and how many follow is not known in advance.
		room := thread.MaxBackfill - bf.Fetched
		done := !more || next == "" || len(events) >= room
		if len(events) > room {
			events = events[:room]
		}
		nb, err := b.store.SlackBackfillPage(context.WithoutCancel(ctx), &store.SlackBackfillPageParams{SessionID: bf.SessionID,
			Cursor: bf.Cursor, Next: next, Done: done, Events: events})
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			return false // another replica recorded it (or the session is gone)
		case err != nil:
			log.ErrorContext(ctx, "slack: recording a thread backfill page", slog.Any("error", err))
			return false
		}
		log.DebugContext(ctx, "slack: thread backfill page recorded", slog.Int("messages", len(events)), slog.Bool("done", nb.Done))
		bf = nb
	}
	log.InfoContext(ctx, "slack: thread backfilled", slog.Int("messages", bf.Fetched))
	return true
}

func (b *Bridge) backfillDone(ctx context.Context, bf *store.SlackBackfill, log *slog.Logger) bool {
	_, err := b.store.SlackBackfillPage(context.WithoutCancel(ctx), &store.SlackBackfillPageParams{SessionID: bf.SessionID, Cursor: bf.Cursor, Done: true})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		log.ErrorContext(ctx, "slack: ending a thread backfill", slog.Any("error", err))
	}
	return err == nil
}

func (b *Bridge) backfillRetry(ctx context.Context, bf *store.SlackBackfill, at time.Time, msg string) {
	if err := b.store.SlackBackfillRetry(context.WithoutCancel(ctx), bf.SessionID, at, msg); err != nil && !errors.Is(err, store.ErrNotFound) {
		b.log.ErrorContext(ctx, "slack: scheduling a thread backfill retry", slog.String("session_id", bf.SessionID), slog.Any("error", err))
	}
	wake(b.backfills.wake)
}

// backfillEvents turns a page of a thread's earlier messages into
// transcript events, oldest first: the bot's own as assistant messages,
// other people's (and, with AllowBots, other bots') as user messages.
// Each is recorded as it would have been had it arrived live (SPEC §5):
// its text as markdown (Bridge.markdown, mentions by display name), the
// bot's mention stripped from a message that mentions it, and Slack's raw
// text, its author and channel beside it (saidFields). Edits, joins and
// other subtypes carry no new text and are left out, as they are when they
// arrive live.
func (b *Bridge) backfillEvents(ctx context.Context, bf *store.SlackBackfill, msgs []slack.Message) []*store.EventAppendParams {
	bot, botUser := b.botID.Load().(string), b.botUserID.Load().(string)
	var out []*store.EventAppendParams
	for _, msg := range msgs {
		if msg.Timestamp == "" || compareSlackTS(msg.Timestamp, bf.Before) >= 0 || !relevantSubtype(msg.SubType) {
			continue
		}
		m := &Message{Type: "message", Subtype: msg.SubType, Channel: bf.Channel, User: msg.User, BotID: msg.BotID, Text: msg.Text,
			TS: msg.Timestamp, ThreadTS: bf.ThreadTS}
		said := func(name string) transcript.Said {
			return transcript.Said{Speaker: name, SlackTS: msg.Timestamp, Backfilled: true}
		}
		switch {
		case msg.BotID != "" && msg.BotID == bot || msg.User != "" && msg.User == botUser:
			out = append(out, transcript.EncodePtr(transcript.AssistantMessage{Text: b.markdown(ctx, m.Text, true),
				Said: said(thread.BotSpeaker), Fields: saidFields(m, false)}, "holdfast"))
			continue
		case msg.User == "" && msg.BotID != "":
			if !b.cfg.AllowBots {
				continue
			}
			// Named by its profile, which users.info does not know; its id
			// stands for its user, as it does for a live bot message.
			name := msg.Username
			if msg.BotProfile != nil && msg.BotProfile.Name != "" {
				name = msg.BotProfile.Name
			}
			m.User = msg.BotID
			out = append(out, transcript.EncodePtr(transcript.UserMessage{Text: b.markdown(ctx, m.Text, true), Said: said(name),
				Fields: saidFields(m, false)}, actor(m.User)))
			continue
		case msg.User == "":
			continue
		}
		// As handleMessage and handleMention record it: a message that
		// mentions the bot is recorded without the mention, as a mention.
		text, mention := m.Text, mentions(m.Text, botUser)
		if mention {
			text = stripMention(text, botUser)
		}
		rec := b.said(ctx, m, mention)
		rec.Text, rec.Backfilled = b.markdown(ctx, text, true), true
		out = append(out, transcript.EncodePtr(rec, actor(m.User)))
	}
	return out
}

// compareSlackTS orders Slack timestamps numerically.
func compareSlackTS(a, b string) int {
	ta, okA := thread.ParseSlackTS(a)
	tb, okB := thread.ParseSlackTS(b)
	if !okA || !okB {
		return strings.Compare(a, b)
	}
	return ta.Compare(tb)
}
