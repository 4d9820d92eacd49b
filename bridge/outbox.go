package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

// sendLoop delivers the outbox: it keeps up to Senders deliveries in
// flight, each the oldest due message of its thread (threads in parallel,
// each thread in order), and claims the next head as soon as a delivery
// ends, so a slow or hanging Slack call holds up its own thread only. With
// nothing to claim it sleeps until the next message is due, a wake-up, a
// delivery's end, or the safety-net tick. The claim is in the database
// (SlackOutboxClaim), so any number of replicas send each message once and
// each thread in order. It returns once ctx is done and every delivery in
// flight has recorded its outcome.
func (b *Bridge) sendLoop(ctx context.Context) {
	var (
		wg       sync.WaitGroup
		inflight atomic.Int64
		ended    = make(chan struct{}, 1)
	)
	defer wg.Wait()
	for ctx.Err() == nil {
		var (
			n   int
			err error
		)
		if free := b.cfg.Senders - int(inflight.Load()); free > 0 {
			var due []*store.SlackOutboxMsg
			now := time.Now()
			due, err = b.store.SlackOutboxClaim(ctx, &store.SlackClaimParams{Holder: b.cfg.Holder, Now: now,
				Until: now.Add(b.cfg.ClaimLease), Limit: free})
			if err != nil && ctx.Err() == nil {
				b.log.ErrorContext(ctx, "slack: outbox claim failed", slog.Any("error", err))
			}
			for _, m := range due {
				inflight.Add(1)
				wg.Go(func() {
					if err := b.deliver(ctx, m); err != nil && ctx.Err() == nil {
						b.log.ErrorContext(ctx, "slack: outbox delivery failed", slog.Int64("outbox_id", m.ID), slog.Any("error", err))
					}
					inflight.Add(-1)
					wake(ended)
					b.cfg.Signals.fire()
				})
			}
			n = len(due)
		}
		b.cfg.Signals.fire()
		if n > 0 && err == nil {
			continue
		}
		wait := b.cfg.Tick
		// With every sender busy only a delivery's end frees one; a head due
		// meanwhile must not make this loop spin.
		if inflight.Load() < int64(b.cfg.Senders) {
			if next, err := b.store.SlackOutboxNextDue(ctx); err == nil {
				wait = min(wait, max(time.Until(next), time.Millisecond))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-b.outboxWake:
		case <-ended:
		case <-t.C:
		}
		t.Stop()
	}
}

// deliver makes one attempt at a claimed message, extending the claim while
// it runs. The outcome is recorded, fenced by the claim, even if ctx ends
// meanwhile (a post Slack answered is worth recording); a message whose
// ctx ended before any call gives its claim back at once.
func (b *Bridge) deliver(ctx context.Context, m *store.SlackOutboxMsg) error {
	rec := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(rec, 5*time.Second)
		defer cancel()
		if err := b.store.SlackOutboxRelease(rctx, m.ID, m.Claim); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		return nil
	}
	log := b.log.With(slog.String("outbox_key", m.DedupeKey), slog.Int64("outbox_id", m.ID), slog.String("method", m.Method),
		slog.String("channel", m.Channel))
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := b.keepClaim(hctx, cancel, func(ctx context.Context, until time.Time) error {
		return b.store.SlackOutboxExtend(ctx, m.ID, m.Claim, until)
	}, log)
	err := b.attempt(hctx, rec, m, log)
	stop()
	if errors.Is(err, store.ErrConflict) {
		log.WarnContext(ctx, "slack: outbox claim lost to another replica; it sends the message", slog.Any("error", err))
		return nil
	}
	return err
}

// attempt makes one attempt at a message and records the outcome through
// rec, the context that outlives ctx.
func (b *Bridge) attempt(ctx, rec context.Context, m *store.SlackOutboxMsg, log *slog.Logger) error {
	// Each attempt is a span in the trace of the work that queued it.
	ctx, span := b.startSpan(tracing.Join(ctx, m.TraceContext), tracing.SpanSlackPost, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("slack.method", m.Method), attribute.String("slack.channel", m.Channel),
			attribute.String("slack.thread_ts", m.ThreadTS), attribute.String("slack.outbox.key", m.DedupeKey),
			attribute.Int("slack.outbox.attempt", m.Attempts+1)))
	defer span.End()
	fail := func(msg string) error {
		b.metrics.failed.Inc()
		if err := b.store.SlackOutboxFail(rec, m.ID, m.Claim, msg); err != nil {
			return err
		}
		b.sentNotify() // a refusal is an outcome too: whoever awaits the message hears it now
		return nil
	}
	opts := []slack.MsgOption{slack.MsgOptionText(m.Text, false)}
	if m.Blocks != "" {
		var bl slack.Blocks
		if err := json.Unmarshal([]byte(m.Blocks), &bl); err != nil {
			return fail("stored blocks do not decode: " + err.Error())
		}
		opts = append(opts, slack.MsgOptionBlocks(bl.BlockSet...))
	}
	var (
		ts  string
		err error
	)
	// One write is given CallTimeout: a call Slack never answers (a
	// half-open connection, a stuck proxy) would otherwise hold its
	// thread's queue, and keep its claim renewed, until a restart. It
	// fails as any unanswered call does; a post is looked for in Slack
	// before it is tried again.
	cctx, cancelCall := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancelCall()
	switch m.Method {
	case store.SlackPost:
		if m.ThreadTS != "" {
			opts = append(opts, slack.MsgOptionTS(m.ThreadTS))
		}
		ts, err = b.post(cctx, m, opts, log)
	case store.SlackEphemeral:
		if m.ThreadTS != "" {
			opts = append(opts, slack.MsgOptionTS(m.ThreadTS))
		}
		ts, err = b.api.PostEphemeralContext(cctx, m.Channel, m.User, opts...)
	case store.SlackUpdate:
		ref, rerr := b.store.SlackOutboxGetByKey(cctx, m.RefKey)
		switch {
		case rerr != nil:
			return fail("message to update is unknown: " + rerr.Error())
		case ref.Status == store.SlackOutboxFailed:
			return fail("message to update was never posted: " + ref.LastError)
		case ref.Status != store.SlackOutboxSentSt:
			// Posted from another queue and not sent yet: wait for it.
			return b.store.SlackOutboxRetry(rec, m.ID, m.Claim, time.Now().Add(b.cfg.BackoffBase), "waiting for "+m.RefKey+" to be posted")
		}
		_, ts, _, err = b.api.UpdateMessageContext(cctx, m.Channel, ref.SentTS, opts...)
	case store.SlackPublish:
		err = b.publishHome(cctx, m)
	case store.SlackRespond:
		err = slack.PostWebhookCustomHTTPContext(cctx, m.ResponseURL, responseClient,
			&slack.WebhookMessage{ResponseType: "ephemeral", Text: m.Text})
	default:
		return fail("unknown method " + m.Method)
	}
	if err == nil {
		b.metrics.sent.Inc()
		span.SetAttributes(attribute.String("slack.ts", ts))
		log.DebugContext(ctx, "slack: sent", slog.String("ts", ts))
		if err := b.store.SlackOutboxSent(rec, m.ID, m.Claim, ts); err != nil {
			return err
		}
		b.sentNotify()
		return nil
	}
	tracing.Fail(span, "", err)
	if errors.Is(err, store.ErrConflict) {
		return err // the claim was lost before the post: nothing was sent, nothing to record
	}
	if ctx.Err() != nil {
		// Shutting down, or the claim was lost: nothing is recorded and the
		// claim lapses, so a post that reaches Slack late is there before
		// another replica looks for it.
		return nil
	}
	next, permanent := b.retryAt(m, err)
	if permanent {
		log.ErrorContext(ctx, "slack: write refused; kept as failed", slog.Int("attempts", m.Attempts+1), slog.Any("error", err))
		return fail(err.Error())
	}
	b.metrics.retried.Inc()
	log.WarnContext(ctx, "slack: write failed; will retry", slog.Int("attempts", m.Attempts+1), slog.Time("next", next), slog.Any("error", err))
	return b.store.SlackOutboxRetry(rec, m.ID, m.Claim, next, err.Error())
}

// outboxEventType is the message metadata event type of every post: its
// payload, {"id": "<outbox id>", "at": "<when it was queued, in µs>"}, is
// how a post whose answer was lost is found in Slack again (SPEC §5). The
// id alone is not enough: another database posting as the same bot (a
// second deployment, or this one before a restore from backup) numbers its
// messages alike, but not at the same microsecond.
const outboxEventType = "holdfast_outbox"

// outboxMark is m's metadata payload.
func outboxMark(m *store.SlackOutboxMsg) map[string]any {
	return map[string]any{"id": strconv.FormatInt(m.ID, 10), "at": strconv.FormatInt(m.CreatedAt.UnixMicro(), 10)}
}

// marks reports whether a post's metadata payload marks m. A post made
// before marks carried "at" is matched by its id alone, so upgrading loses
// no post whose answer was lost.
func marks(payload map[string]any, m *store.SlackOutboxMsg) bool {
	want := outboxMark(m)
	at, ok := payload["at"]
	return fmt.Sprint(payload["id"]) == want["id"] && (!ok || fmt.Sprint(at) == want["at"])
}

// Bounds of the search for an earlier attempt. lookupSkew widens it back
// from the first attempt, because Slack's clock (which gives ts) may be
// behind ours; lookupPages of lookupPageSize messages bound what one search
// reads.
const (
	lookupSkew     = 10 * time.Minute
	lookupPages    = 25
	lookupPageSize = 200
)

// post makes chat.postMessage exactly once across crashes (SPEC §5). The
// attempt is on record before the call, and the post carries its outbox id
// as message metadata; a message with an attempt on record may be in Slack
// although its ts was never recorded (the process died, or the answer was
// lost), so it is looked up there first and, if found, answered with the
// ts found instead of being posted again.
//
// The attempt mark stays after a failure Slack answered (429, ok:false),
// which costs one needless search on the retry: it keeps one rule (an
// attempted post is searched for) instead of telling outcomes apart.
func (b *Bridge) post(ctx context.Context, m *store.SlackOutboxMsg, opts []slack.MsgOption, log *slog.Logger) (string, error) {
	if m.AttemptedAt != nil {
		ts, found, err := b.findPosted(ctx, m)
		var se slack.SlackErrorResponse
		switch {
		case err == nil && found:
			b.metrics.found.Inc()
			log.InfoContext(ctx, "slack: message was already posted by an earlier attempt; recorded, not posted again",
				slog.String("ts", ts))
			return ts, nil
		case err == nil:
		case errors.As(err, &se) && !transientSlackErrors[se.Err]:
			// Slack refuses the search itself (missing_scope,
			// not_in_channel): asking again will not help, and holding the
			// thread back for good would drop its messages.
			log.ErrorContext(ctx, "slack: cannot look for an earlier attempt; posting again (exactly-once needs history read access: channels:history, groups:history, im:history)",
				slog.Any("error", err))
		default:
			return "", fmt.Errorf("look in Slack for an earlier attempt: %w", err)
		}
	}
	// Recorded every time, fenced by the claim: a sender whose claim lapsed
	// (another replica may be sending the message) never posts.
	if err := b.store.SlackOutboxAttempt(ctx, m.ID, m.Claim); err != nil {
		return "", fmt.Errorf("record the attempt before posting: %w", err)
	}
	opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: outboxEventType, EventPayload: outboxMark(m)}))
	_, ts, err := b.api.PostMessageContext(ctx, m.Channel, opts...)
	return ts, err
}

// findPosted looks for m in Slack by its metadata, among the bot's messages
// since its first attempt. A thread reply is searched for in its thread
// (conversations.replies); a top-level message in the channel's history
// (conversations.history), because conversations.replies needs the ts of the
// thread's root, and for a top-level post that is the very ts being looked
// for. Both are asked for include_all_metadata (without it Slack leaves
// metadata out) and bounded by oldest, so a search reads what was posted
// since the attempt, not the whole conversation.
func (b *Bridge) findPosted(ctx context.Context, m *store.SlackOutboxMsg) (string, bool, error) {
	bot, err := b.ownBotID(ctx)
	if err != nil {
		return "", false, err
	}
	oldest := slackTS(m.AttemptedAt.Add(-lookupSkew))
	cursor := ""
	for range lookupPages {
		var (
			msgs []slack.Message
			more bool
			next string
		)
		if m.ThreadTS != "" {
			msgs, more, next, err = b.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: m.Channel, Timestamp: m.ThreadTS, Cursor: cursor, Oldest: oldest, Inclusive: true,
				Limit: lookupPageSize, IncludeAllMetadata: true})
			var se slack.SlackErrorResponse
			if errors.As(err, &se) && se.Err == "thread_not_found" {
				return "", false, nil // no thread, so nothing of ours in it
			}
		} else {
			var h *slack.GetConversationHistoryResponse
			h, err = b.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: m.Channel, Cursor: cursor, Oldest: oldest, Inclusive: true,
				Limit: lookupPageSize, IncludeAllMetadata: true})
			if err == nil {
				msgs, more, next = h.Messages, h.HasMore, h.ResponseMetaData.NextCursor
			}
		}
		if err != nil {
			return "", false, err
		}
		for _, msg := range msgs {
			md := msg.Metadata
			if md.EventType == outboxEventType && marks(md.EventPayload, m) && msg.BotID == bot {
				return msg.Timestamp, true, nil
			}
		}
		if !more || next == "" {
			return "", false, nil
		}
		cursor = next
	}
	b.log.WarnContext(ctx, "slack: searched as far as allowed for an earlier attempt; treating it as not posted",
		slog.Int64("outbox_id", m.ID), slog.String("channel", m.Channel), slog.Int("messages", lookupPages*lookupPageSize))
	return "", false, nil
}

// ownBotID is the bot's bot_id, which its own posts carry (so another app's
// metadata is never taken for ours); learnt by identify, or asked for here
// when a search comes first.
func (b *Bridge) ownBotID(ctx context.Context) (string, error) {
	if id := b.botID.Load().(string); id != "" {
		return id, nil
	}
	res, err := b.api.AuthTestContext(ctx)
	if err != nil {
		return "", fmt.Errorf("auth.test: %w", err)
	}
	b.botID.CompareAndSwap("", res.BotID)
	b.botUserID.CompareAndSwap("", res.UserID)
	return res.BotID, nil
}

// slackTS writes t as a Slack timestamp ("<seconds>.<microseconds>").
func slackTS(t time.Time) string { return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000) }

// responseClient posts to slash commands' response_urls, which are
// Slack's hooks rather than its Web API; bounded as Web API calls are.
var responseClient = &http.Client{Timeout: 30 * time.Second}

// transientSlackErrors are ok:false answers that mean "try again later".
var transientSlackErrors = map[string]bool{
	"ratelimited": true, "fatal_error": true, "internal_error": true, "service_unavailable": true,
	"request_timeout": true, "team_added_to_org": true,
}

// retryAt decides when to try again after err: a 429 waits Retry-After, an
// outage backs off exponentially without limit, and an outright refusal is
// retried MaxRefusals times before it is given up (permanent).
func (b *Bridge) retryAt(m *store.SlackOutboxMsg, err error) (time.Time, bool) {
	now := time.Now()
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return now.Add(max(rl.RetryAfter, time.Second)), false
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && !transientSlackErrors[se.Err] && m.Attempts+1 >= b.cfg.MaxRefusals {
		return time.Time{}, true
	}
	d := b.cfg.BackoffBase << min(m.Attempts, 20)
	d = min(d, b.cfg.BackoffMax)
	d += time.Duration(rand.Int64N(int64(d)/5 + 1)) // jitter, so threads do not retry in lockstep
	return now.Add(d), false
}
