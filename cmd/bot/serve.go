package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"go.opentelemetry.io/otel/trace"

	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/cmd/bot/internal/telemetry"
	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
)

func cmdServe(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, _, err := parse("serve", args, env, stdout, nil)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	tp, stopTracing, err := startTracing(ctx, env, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: what the engine and bridge recorded while stopping is flushed
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Close(); err != nil {
			log.Error("closing database", slog.Any("error", err))
		}
	}()
	if err := bootstrapAdmin(ctx, db, c.AdminPassword, stdout, log); err != nil {
		return err
	}
	lib := library.New(db, log)
	if err := lib.SeedExamples(ctx); errors.Is(err, store.ErrConflict) {
		// Replicas starting together on a new database (SPEC §9) race to
		// seed: the loser's second pass finds what the winner wrote.
		if err := lib.SeedExamples(ctx); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// Before the runner and the API: indexes written before the store kept
	// the names workflows look up (or left stale by older binaries) are
	// brought in line with the library once, at start.
	if _, err := lib.Reconcile(ctx); err != nil {
		return err
	}

	if c.SlackBotToken == "" {
		log.Info("Slack is disabled: set SLACK_BOT_TOKEN (and SLACK_APP_TOKEN for Socket Mode, or SLACK_SIGNING_SECRET for HTTP mode) to enable it")
	}

	models := newModels(c, tp)
	eng := newEngine(c, db, models, tp, log)
	engCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Start(engCtx) }()
	defer func() {
		// Graceful: workers finish or release their runs before the store closes.
		stopEngine()
		if err := <-engDone; err != nil {
			log.Error("engine", slog.Any("error", err))
		}
		log.Info("engine stopped")
	}()

	sess := sessions.New(db, sessions.Config{DefaultPolicy: c.DefaultPolicy, Models: models, DefaultModel: c.Model, Tracer: tp}, eng, log)
	defer sess.Close() // before db.Close: background turns settle first
	if err := sess.Recover(ctx); err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watch sync.WaitGroup
	watch.Go(func() { sess.Watch(watchCtx) })
	defer func() { stopWatch(); watch.Wait() }() // before sess.Close and db.Close

	slackHandler, permalinks, stopSlack, err := startSlack(ctx, c, db, eng, sess, tp, log)
	if err != nil {
		return err
	}
	defer stopSlack() // first: the bridge stops before sessions and the store

	deps := web.Deps{Store: db, Library: lib, Sessions: sess, Engine: eng, Log: log, BaseURL: c.BaseURL}
	if permalinks != nil {
		deps.Slack = permalinks // a nil *Permalinks would not be a nil interface
	}
	console := web.New(deps)
	handler := server.Handler(server.Deps{
		Store: db,
		API: api.New(api.Deps{Store: db, Library: lib, Log: log, Cookie: console.Cookie, CSRF: console.CSRF,
			Sessions: sess, Engine: eng, InternalKey: c.InternalKey}),
		Metrics:     promhttp.HandlerFor(eng.Registry(), promhttp.HandlerOpts{}),
		Slack:       slackHandler,
		Console:     console.Handler(),
		InternalKey: c.InternalKey,
	})

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stdout, "Holdfast is listening on http://%s\n", ln.Addr())
	log.Info("serving", slog.String("addr", ln.Addr().String()), slog.String("db", redactDB(c.DB)))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// bootstrapAdmin creates user admin on first start, printing a generated
// password once when none was configured.
func bootstrapAdmin(ctx context.Context, db store.Store, password string, stdout io.Writer, log *slog.Logger) error {
	n, err := db.UserCount(ctx)
	if err != nil || n > 0 {
		return err
	}
	generated := password == ""
	if generated {
		var b [18]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		password = base64.RawURLEncoding.EncodeToString(b[:])
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("bootstrap admin: %w", err)
	}
	if _, err := db.UserCreate(ctx, &store.User{Username: "admin", PasswordHash: string(hash), Role: store.RoleAdmin}); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Another replica starting on the same database created it first.
			return nil
		}
		return fmt.Errorf("bootstrap admin: %w", err)
	}
	if generated {
		fmt.Fprintf(stdout, "Created user admin with password %s (shown once; set HOLDFAST_ADMIN_PASSWORD to choose it)\n", password)
	} else {
		log.Info("created user admin with HOLDFAST_ADMIN_PASSWORD")
	}
	return nil
}

func newModels(c *config, tp trace.TracerProvider) *model.Registry {
	return model.NewRegistry(c.Model, model.Config{OpenAIBaseURL: c.OpenAIBaseURL, OpenAIAPIKey: c.OpenAIAPIKey, Tracer: tp})
}

// startTracing installs OTLP/HTTP tracing when the OTEL_* variables ask for
// it (a nil provider otherwise); stop flushes buffered spans.
func startTracing(ctx context.Context, env map[string]string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	tc, err := telemetry.FromEnv(env)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	tp, shutdown, err := telemetry.Setup(ctx, tc)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	if tp != nil {
		log.Info("tracing: exporting spans over OTLP/HTTP", slog.String("endpoint", tc.Endpoint), slog.String("service", tc.ServiceName))
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans at shutdown", slog.Any("error", err))
		}
	}, nil
}

// startSlack starts the Slack bridge when SLACK_BOT_TOKEN is set: Socket
// Mode with SLACK_APP_TOKEN, else HTTP mode through the returned handler
// (mounted at /slack). It also answers the console's thread permalinks
// (nil without Slack). stop ends it and waits for its workers.
func startSlack(ctx context.Context, c *config, db store.Store, eng *engine.Engine, sess *sessions.Service, tp trace.TracerProvider,
	log *slog.Logger) (http.Handler, *bridge.Permalinks, func(), error) {
	if c.SlackBotToken == "" {
		return nil, nil, func() {}, nil
	}
	// A backstop for every Web API call (the outbox bounds its writes
	// tighter): an answer that never comes must not hold a caller forever.
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: time.Minute})}
	if c.SlackAPIURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimRight(c.SlackAPIURL, "/")+"/"))
	}
	if c.SlackAppToken != "" {
		opts = append(opts, slack.OptionAppLevelToken(c.SlackAppToken))
	}
	api := slack.New(c.SlackBotToken, opts...)
	b := bridge.New(bridge.Config{SigningSecret: c.SlackSigning, BaseURL: c.BaseURL, HoldsChannel: c.SlackHoldsChan, Stewards: c.stewards(),
		AllowBots: c.SlackAllowBots == "true", ClaimLease: c.SlackLease, Tracer: tp},
		db, api, eng, sess, log)
	if err := eng.Registry().Register(b); err != nil {
		return nil, nil, nil, fmt.Errorf("slack metrics: %w", err)
	}

	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Start(bctx) })
	var handler http.Handler
	if c.SlackAppToken != "" {
		log.Info("Slack: Socket Mode")
		wg.Go(func() {
			if err := b.RunSocketMode(bctx, socketmode.New(api)); err != nil {
				log.Error("slack socket mode stopped", slog.Any("error", err))
			}
		})
	} else {
		log.Info("Slack: HTTP mode", slog.String("events_url", c.BaseURL+"/slack/events"),
			slog.String("interactivity_url", c.BaseURL+"/slack/interactions"), slog.String("slash_command_url", c.BaseURL+"/slack/commands"))
		handler = b.Handler()
	}
	return handler, &bridge.Permalinks{API: api}, func() { cancel(); wg.Wait() }, nil
}

// newEngine builds the engine from the config (shared by serve and enqueue).
func newEngine(c *config, db store.Store, models *model.Registry, tp trace.TracerProvider, log *slog.Logger) *engine.Engine {
	maxRecovery := c.MaxRecovery
	if maxRecovery == 0 {
		maxRecovery = -1 // HOLDFAST_MAX_RECOVERY=0 means no recoveries; the engine's 0 is "default"
	}
	cfg := engine.Config{Workers: c.Workers, StuckRun: c.StuckRun, MaxRecovery: maxRecovery,
		PassInterval: c.PassInterval, SlackStewards: c.stewards(), Tracer: tp,
		// Replicas share a PostgreSQL database and elect a leader; a SQLite
		// file has one process, which leads (SPEC §9).
		Elect: postgres.IsURL(c.DB)}
	return engine.New(cfg, db, models, log)
}

// cmdEnqueue enqueues one item straight into the database. A running server
// picks it up on its next pass (at the latest after HOLDFAST_PASS_INTERVAL);
// POST /api/workflows/{command}/enqueue starts it at once.
func cmdEnqueue(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	var command string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		command, args = args[0], args[1:]
	}
	var dedupe, payload, sessionID string
	c, fs, err := parse("enqueue", args, env, stdout, func(fs *flag.FlagSet) {
		fs.StringVar(&dedupe, "dedupe", "", "dedupe key: a second enqueue with the same key is a no-op")
		fs.StringVar(&payload, "payload", "{}", "payload JSON object")
		fs.StringVar(&sessionID, "session", "", "session id to run in (default: a new workflow session)")
	})
	if err != nil {
		return err
	}
	if command == "" && fs.NArg() > 0 {
		command = fs.Arg(0)
	}
	if command == "" || dedupe == "" {
		return errors.New("enqueue: usage: bot enqueue COMMAND --dedupe KEY [--payload JSON]")
	}
	var pl map[string]any
	if err := json.Unmarshal([]byte(payload), &pl); err != nil || pl == nil {
		return fmt.Errorf("enqueue: --payload must be a JSON object: %v", err)
	}
	log := newLogger(stderr)
	tp, stopTracing, err := startTracing(ctx, env, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer stopTracing()
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	eng := newEngine(c, db, newModels(c, tp), tp, log)
	it, created, err := eng.Enqueue(ctx, engine.EnqueueParams{Command: command, DedupeKey: dedupe, Payload: pl,
		SessionID: sessionID, OwnerUID: "cli"})
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	verb := "enqueued"
	if !created {
		verb = "already enqueued"
	}
	fmt.Fprintf(stdout, "%s %s item %s (status %s)\n", verb, it.Command, it.ID, it.Status)
	return nil
}

// stewards is SLACK_STEWARDS as a list.
func (c *config) stewards() []string {
	var out []string
	for _, s := range strings.Split(c.SlackStewards, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
