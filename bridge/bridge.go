// Package bridge connects Holdfast to Slack (SPEC §5): an HTTP handler and a
// Socket Mode client that store every delivery in a durable inbox before
// acknowledging it, a worker that turns deliveries into session messages,
// commands, enqueues and hold decisions, a mirror that follows Slack
// sessions' transcripts into their threads, and a durable outbox through
// which every write to Slack goes.
package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

// Engine is what the bridge needs of the workflow engine, as
// *engine.Engine has it; tests stand in for it to record what the bridge
// asked.
type Engine interface {
	// Enqueue queues a workflow item; a second call with the same dedupe key
	// answers enqueued=false. Unknown commands wrap store.ErrNotFound,
	// workflows that are not live store.ErrConflict.
	Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error)
	// Decide approves or rejects a hold. Refusals wrap store.ErrForbidden;
	// an already decided hold wraps store.ErrConflict.
	Decide(ctx context.Context, p engine.DecideParams) (*store.Hold, error)
	// IsSteward answers whether d may decide holds.
	IsSteward(ctx context.Context, d engine.Decider) (bool, error)
	// SlackStewards lists the Slack user ids of everyone who may decide
	// holds (whose App Home lists them).
	SlackStewards(ctx context.Context) ([]string, error)
	// Subscribe registers fn for the engine's change notifications.
	Subscribe(fn func(engine.Event))
	// Lead runs fn while this process leads the replicas (SPEC §9), with a
	// context that ends when it stops leading; it returns when ctx ends.
	Lead(ctx context.Context, fn func(ctx context.Context))
}

// Config tunes the bridge; zero values take the defaults noted.
type Config struct {
	// Signals, in tests, is told of every unit of work finished.
	Signals *TestSignals
	// SigningSecret verifies HTTP mode requests.
	SigningSecret string
	// BaseURL prefixes console links posted to Slack.
	BaseURL string
	// Stewards are the Slack user ids of SLACK_STEWARDS, named in refusals
	// so a user knows whom to ask (the engine decides who is a steward).
	Stewards []string
	// HoldsChannel, when set, also receives every hold card.
	HoldsChannel string
	// AllowBots processes messages other bots post (never the bot's own).
	AllowBots bool
	// Tick is the safety-net interval of the workers (default 5s); normal
	// work is woken at once.
	Tick time.Duration
	// BackoffBase is the first retry delay of a failed Slack write (default
	// 1s); it doubles per attempt up to BackoffMax (default 5m).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxRefusals is how many times a write Slack refuses outright (an
	// ok:false answer such as channel_not_found) is tried before it is marked
	// failed (default 5). Outages and rate limits are retried without limit.
	MaxRefusals int
	// Senders bounds concurrent Slack writes across threads (default 4).
	Senders int
	// InboxWorkers bounds threads whose deliveries are handled at once
	// (default 4); a thread's own deliveries are always handled in order.
	InboxWorkers int
	// InboxRetry is the pause before a failed delivery's next attempt, times
	// the attempts so far (default 1s).
	InboxRetry time.Duration
	// InboxRetention keeps processed deliveries this long (default 7 days,
	// far past Slack's redelivery window); OutboxRetention keeps sent
	// messages (default 30 days; hold cards are kept for good).
	InboxRetention  time.Duration
	OutboxRetention time.Duration
	// BackfillWait bounds how long a mention that binds an existing thread
	// waits for the thread's earlier messages before it is answered
	// (default 1.5s, so the answer is under way within 2 s); the rest of the
	// backfill goes on in the background (threads.go).
	BackfillWait time.Duration
	// BackfillPageSize is the limit a backfill asks conversations.replies
	// for (default 200; Slack answers at most 15 to non-Marketplace apps).
	BackfillPageSize int
	// Holder names this bridge in the claims of inbox deliveries and outbox
	// messages it takes (default host:pid:<random>), unique per process so
	// replicas on one database never mistake each other's claims.
	Holder string
	// ClaimLease is how long a claim holds unless extended (default 15s): a
	// delivery or message claimed by a replica that died is taken over after
	// it. Live work extends its claim every third of it; a send cut short
	// (shutdown) leaves its claim to lapse rather than give it back, so a
	// post still on the wire is in Slack before another replica looks for it.
	ClaimLease time.Duration
	// CallTimeout bounds one Slack write (default 30s).
	CallTimeout time.Duration
	// Tracer records each delivery's handling and each Slack write as
	// spans (SPEC §10); nil records nothing.
	Tracer trace.TracerProvider
}

func (c *Config) defaults() {
	if c.Tick <= 0 {
		c.Tick = 5 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.MaxRefusals <= 0 {
		c.MaxRefusals = 5
	}
	if c.Senders <= 0 {
		c.Senders = 4
	}
	if c.InboxWorkers <= 0 {
		c.InboxWorkers = 4
	}
	if c.InboxRetry <= 0 {
		c.InboxRetry = time.Second
	}
	if c.InboxRetention <= 0 {
		c.InboxRetention = 7 * 24 * time.Hour
	}
	if c.OutboxRetention <= 0 {
		c.OutboxRetention = 30 * 24 * time.Hour
	}
	if c.BackfillWait <= 0 {
		c.BackfillWait = 1500 * time.Millisecond
	}
	if c.BackfillPageSize <= 0 {
		c.BackfillPageSize = 200
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), strings.TrimPrefix(store.NewID("b"), "b_"))
	}
	if c.ClaimLease <= 0 {
		c.ClaimLease = 15 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
}

// Bridge is the Slack bridge.
type Bridge struct {
	cfg      Config
	store    store.Store
	api      *slack.Client
	engine   Engine
	sessions *sessions.Service
	log      *slog.Logger

	botUserID atomic.Value // string
	botID     atomic.Value // string

	// inbox is the state of the per-thread inbox workers (which threads
	// they are on, and which wait for a retry, is in the store's claims).
	inbox struct {
		sem chan struct{} // bounds workers (InboxWorkers)
		wg  sync.WaitGroup
	}

	inboxWake  chan struct{}
	mirrorWake chan struct{}
	outboxWake chan struct{}

	// mirror is the mirror loop's own state (one goroutine; no lock).
	mirror struct {
		// cur is the id of the last event the mirror has looked at: the
		// stored cursor, or further when the events after it belonged to
		// sessions without a Slack thread (the stored cursor only moves
		// with a write, and a pass that queues nothing writes nothing).
		cur    int64
		loaded bool
	}
	// committed is the newest event id the store has notified: every event
	// up to it is committed.
	committed atomic.Int64

	metrics metrics

	backfills backfillState // threads.go
	tracer    trace.Tracer

	stewardship // steward.go: caches and signals of cards, modals and the App Home
}

type metrics struct {
	queued, sent, retried, failed, found prometheus.Counter
	inbox                                *prometheus.CounterVec
}

// New builds a bridge. api is the Web API client (point it at a fake with
// slack.OptionAPIURL); engine and sessions may not be nil.
func New(cfg Config, st store.Store, api *slack.Client, eng Engine, ses *sessions.Service, log *slog.Logger) *Bridge {
	cfg.defaults()
	b := &Bridge{
		cfg: cfg, store: st, api: api, engine: eng, sessions: ses, log: log,
		tracer:     tracing.Tracer(cfg.Tracer),
		inboxWake:  make(chan struct{}, 1),
		mirrorWake: make(chan struct{}, 1),
		outboxWake: make(chan struct{}, 1),
	}
	b.inbox.sem = make(chan struct{}, cfg.InboxWorkers)
	b.backfills.init()
	b.botUserID.Store("")
	b.botID.Store("")
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "holdfast", Subsystem: "slack_outbox", Name: name, Help: help})
	}
	b.metrics = metrics{
		queued:  counter("queued_total", "Slack writes queued in the outbox."),
		sent:    counter("sent_total", "Slack writes delivered."),
		retried: counter("retried_total", "Slack write attempts that failed and will be retried (outage, 429, refusal)."),
		failed:  counter("failed_total", "Slack writes marked failed after Slack refused them repeatedly (kept in the outbox)."),
		found:   counter("found_total", "Posts found already in Slack (an earlier attempt's answer was lost, e.g. to a crash) and recorded instead of posted again."),
		inbox: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "holdfast", Subsystem: "slack_inbox", Name: "received_total",
			Help: "Slack deliveries acknowledged, by kind and whether they were new or a redelivery."}, []string{"kind", "result"}),
	}
	return b
}

// The bridge is a prometheus.Collector of its outbox and inbox counters, to
// be registered on the /metrics registry.
var _ prometheus.Collector = (*Bridge)(nil)

func (b *Bridge) collectors() []prometheus.Collector {
	m := b.metrics
	return []prometheus.Collector{m.queued, m.sent, m.retried, m.failed, m.found, m.inbox}
}

// Describe implements prometheus.Collector.
func (b *Bridge) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range b.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (b *Bridge) Collect(ch chan<- prometheus.Metric) {
	for _, c := range b.collectors() {
		c.Collect(ch)
	}
}

// Wake nudges the mirror; it never blocks. The store already wakes it after
// every transcript write (Start subscribes), so only a writer outside this
// process's store needs it.
func (b *Bridge) Wake() { wake(b.mirrorWake) }

// untraced is the span of a bridge that does not trace.
var untraced = trace.SpanFromContext(context.Background())

// startSpan starts a span when the bridge traces; otherwise it answers ctx
// and a span that records nothing, at no cost.
func (b *Bridge) startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if b.cfg.Tracer == nil {
		return ctx, untraced
	}
	return b.tracer.Start(ctx, name, opts...)
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// CanReply reports whether a run's session has a Slack thread a `reply`
// dispatch is posted into.
func CanReply(s *store.Session) bool {
	if s == nil {
		return false
	}
	for _, t := range s.Tags {
		if _, _, ok := parseTag(t); ok {
			return true
		}
	}
	return false
}

// Start runs the inbox worker, the mirror and the outbox sender until ctx is
// done. Deliveries left unprocessed by a previous process are handled first.
func (b *Bridge) Start(ctx context.Context) error {
	// Every transcript write, whoever makes it (a chat turn, a run, a
	// console message), wakes the mirror, so what is recorded for a thread
	// is queued for Slack within milliseconds (SPEC §5), not at the tick.
	committed := b.store.EventSubscribe(ctx)
	// Holds from sessions without a Slack thread change stewards' App Home
	// too; the mirror sees only Slack sessions' transcripts.
	b.engine.Subscribe(func(ev engine.Event) { b.homeOnEngineEvent(ctx, ev) })
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := range committed {
			b.committed.Store(max(id, b.committed.Load()))
			wake(b.mirrorWake)
		}
	})
	wg.Go(func() { b.identify(ctx) })
	wg.Go(func() { b.loop(ctx, "inbox", b.inboxWake, b.processInbox) })
	wg.Go(func() { b.loop(ctx, "mirror", b.mirrorWake, b.mirrorOnce) })
	wg.Go(func() { b.sendLoop(ctx) })
	wg.Go(func() { b.backfillLoop(ctx) })
	// Pruning is once-among-replicas work: it runs on the leader (SPEC §9).
	wg.Go(func() { b.engine.Lead(ctx, b.pruneLoop) })
	wg.Wait()
	b.inbox.wg.Wait() // thread workers finish (or abandon) their delivery
	return nil
}

// pruneLoop deletes old inbox and outbox rows when this process becomes
// the leader and then hourly, so the tables hold recent history, not all of
// it; ctx ends when leadership does.
func (b *Bridge) pruneLoop(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		n, err := b.store.SlackPrune(ctx, now.Add(-b.cfg.InboxRetention), now.Add(-b.cfg.OutboxRetention))
		if err != nil && ctx.Err() == nil {
			b.log.ErrorContext(ctx, "slack: pruning inbox and outbox", slog.Any("error", err))
		} else if n > 0 {
			b.log.InfoContext(ctx, "slack: pruned old inbox and outbox rows", slog.Int64("rows", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// identify learns the bot's own ids, so its messages are never treated as
// input; retried until Slack answers.
func (b *Bridge) identify(ctx context.Context) {
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		res, err := b.api.AuthTestContext(ctx)
		if err == nil {
			b.botUserID.Store(res.UserID)
			b.botID.Store(res.BotID)
			b.teamURL.Store(res.URL)
			b.log.Info("slack: connected", slog.String("bot_user_id", res.UserID), slog.String("team", res.Team))
			return
		}
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("slack: auth.test failed; retrying", slog.Any("error", err), slog.Duration("in", delay))
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// loop runs pass until it reports no more work, then waits for a wake-up or
// the safety-net tick.
func (b *Bridge) loop(ctx context.Context, name string, wakeC chan struct{}, pass func(context.Context) (bool, error)) {
	t := time.NewTicker(b.cfg.Tick)
	defer t.Stop()
	for {
		for {
			more, err := pass(ctx)
			if err != nil && ctx.Err() == nil {
				b.log.ErrorContext(ctx, "slack: "+name+" pass failed", slog.Any("error", err))
			}
			b.cfg.Signals.fire()
			if !more || err != nil || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wakeC:
		case <-t.C:
		}
	}
}

// parseTag splits a thread tag "slack:<channel>:<thread_ts>".
func parseTag(tag string) (channel, threadTS string, ok bool) {
	rest, ok := strings.CutPrefix(tag, "slack:")
	if !ok {
		return "", "", false
	}
	channel, threadTS, ok = strings.Cut(rest, ":")
	if !ok || channel == "" || threadTS == "" {
		return "", "", false
	}
	return channel, threadTS, true
}

func threadTag(channel, threadTS string) string { return "slack:" + channel + ":" + threadTS }

func queueOf(channel, threadTS string) string { return channel + ":" + threadTS }

// enqueueOutbox queues writes and wakes the sender. Each write carries the
// trace context of the work that queued it (a delivery being handled), so
// its post joins that trace.
func (b *Bridge) enqueueOutbox(ctx context.Context, msgs ...*store.SlackOutboxAddParams) error {
	if b.cfg.Tracer != nil {
		if tc := tracing.FromContext(ctx); tc != "" {
			for _, m := range msgs {
				if m.TraceContext == "" {
					m.TraceContext = tc
				}
			}
		}
	}
	n, err := b.store.SlackOutboxAdd(ctx, msgs)
	if err != nil {
		return fmt.Errorf("queue slack write: %w", err)
	}
	b.metrics.queued.Add(float64(n))
	wake(b.outboxWake)
	return nil
}
