package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

// outboxBatch bounds the queue heads one sender pass reads.
const outboxBatch = 50

// sendLoop delivers the outbox: every pass sends each thread's oldest due
// message (threads in parallel, each thread in order), then sleeps until the
// next message is due, a wake-up, or the safety-net tick.
func (b *Bridge) sendLoop(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := b.sendOnce(ctx)
		if err != nil && ctx.Err() == nil {
			b.log.ErrorContext(ctx, "slack: outbox pass failed", slog.Any("error", err))
		}
		if n > 0 && err == nil {
			continue
		}
		wait := b.cfg.Tick
		if next, err := b.store.SlackOutboxNextDue(ctx); err == nil {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-b.outboxWake:
		case <-t.C:
		}
		t.Stop()
	}
}

// sendOnce makes one attempt at each due queue head; it answers how many
// attempts it made.
func (b *Bridge) sendOnce(ctx context.Context) (int, error) {
	due, err := b.store.SlackOutboxDue(ctx, time.Now(), outboxBatch)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	sem := make(chan struct{}, b.cfg.Senders)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, m := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.deliver(ctx, m); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return len(due), errors.Join(errs...)
}

// deliver makes one attempt at a message and records the outcome.
func (b *Bridge) deliver(ctx context.Context, m *store.SlackOutboxMsg) error {
	// Each attempt is a span in the trace of the work that queued it.
	ctx, span := b.startSpan(tracing.Join(ctx, m.TraceContext), tracing.SpanSlackPost, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("slack.method", m.Method), attribute.String("slack.channel", m.Channel),
			attribute.String("slack.thread_ts", m.ThreadTS), attribute.String("slack.outbox.key", m.DedupeKey),
			attribute.Int("slack.outbox.attempt", m.Attempts+1)))
	defer span.End()
	log := b.log.With(slog.String("outbox_key", m.DedupeKey), slog.String("method", m.Method), slog.String("channel", m.Channel))
	opts := []slack.MsgOption{slack.MsgOptionText(m.Text, false)}
	if m.Blocks != "" {
		var bl slack.Blocks
		if err := json.Unmarshal([]byte(m.Blocks), &bl); err != nil {
			b.metrics.failed.Inc()
			return b.store.SlackOutboxFail(ctx, m.ID, "stored blocks do not decode: "+err.Error())
		}
		opts = append(opts, slack.MsgOptionBlocks(bl.BlockSet...))
	}
	var (
		ts  string
		err error
	)
	switch m.Method {
	case store.SlackPost:
		if m.ThreadTS != "" {
			opts = append(opts, slack.MsgOptionTS(m.ThreadTS))
		}
		_, ts, err = b.api.PostMessageContext(ctx, m.Channel, opts...)
	case store.SlackEphemeral:
		if m.ThreadTS != "" {
			opts = append(opts, slack.MsgOptionTS(m.ThreadTS))
		}
		ts, err = b.api.PostEphemeralContext(ctx, m.Channel, m.User, opts...)
	case store.SlackUpdate:
		ref, rerr := b.store.SlackOutboxGetByKey(ctx, m.RefKey)
		switch {
		case rerr != nil:
			b.metrics.failed.Inc()
			return b.store.SlackOutboxFail(ctx, m.ID, "message to update is unknown: "+rerr.Error())
		case ref.Status == store.SlackOutboxFailed:
			b.metrics.failed.Inc()
			return b.store.SlackOutboxFail(ctx, m.ID, "message to update was never posted: "+ref.LastError)
		case ref.Status != store.SlackOutboxSentSt:
			// Posted from another queue and not sent yet: wait for it.
			return b.store.SlackOutboxRetry(ctx, m.ID, time.Now().Add(b.cfg.BackoffBase), "waiting for "+m.RefKey+" to be posted")
		}
		_, ts, _, err = b.api.UpdateMessageContext(ctx, m.Channel, ref.SentTS, opts...)
	default:
		b.metrics.failed.Inc()
		return b.store.SlackOutboxFail(ctx, m.ID, "unknown method "+m.Method)
	}
	if err == nil {
		b.metrics.sent.Inc()
		span.SetAttributes(attribute.String("slack.ts", ts))
		log.DebugContext(ctx, "slack: sent", slog.String("ts", ts))
		return b.store.SlackOutboxSent(ctx, m.ID, ts)
	}
	tracing.Fail(span, "", err)
	if ctx.Err() != nil {
		return nil // shutting down: the message stays due, unattempted
	}
	next, permanent := b.retryAt(m, err)
	if permanent {
		b.metrics.failed.Inc()
		log.ErrorContext(ctx, "slack: write refused; kept as failed", slog.Int("attempts", m.Attempts+1), slog.Any("error", err))
		return b.store.SlackOutboxFail(ctx, m.ID, err.Error())
	}
	b.metrics.retried.Inc()
	log.WarnContext(ctx, "slack: write failed; will retry", slog.Int("attempts", m.Attempts+1), slog.Time("next", next), slog.Any("error", err))
	return b.store.SlackOutboxRetry(ctx, m.ID, next, err.Error())
}

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
