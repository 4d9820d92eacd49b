package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

func cmdServe(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, _, err := parse("serve", args, env, stderr, nil)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
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
	if err := lib.SeedExamples(ctx); err != nil {
		return err
	}

	if c.SlackBotToken == "" {
		log.Info("Slack is disabled: set SLACK_BOT_TOKEN (and SLACK_APP_TOKEN for Socket Mode, or SLACK_SIGNING_SECRET for HTTP mode) to enable it")
	}

	models := model.NewRegistry(c.Model, model.Config{OpenAIBaseURL: c.OpenAIBaseURL, OpenAIAPIKey: c.OpenAIAPIKey})
	// No engine yet: chat turns answer, enqueueing says the engine is not running.
	sess := sessions.New(db, sessions.Config{DefaultPolicy: c.DefaultPolicy, Models: models, DefaultModel: c.Model}, nil, log)
	defer sess.Close() // before db.Close: background turns settle first

	console := web.New(web.Deps{Store: db, Library: lib, Sessions: sess, Log: log, BaseURL: c.BaseURL})
	handler := server.Handler(server.Deps{
		Store: db,
		API: api.New(api.Deps{Store: db, Library: lib, Log: log, Cookie: console.Cookie, CSRF: console.CSRF,
			Sessions: sess, InternalKey: c.InternalKey}),
		Console:     console.Handler(),
		InternalKey: c.InternalKey,
	})

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stdout, "Holdfast is listening on http://%s\n", ln.Addr())
	log.Info("serving", slog.String("addr", ln.Addr().String()), slog.String("db", c.DB))

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
		return fmt.Errorf("bootstrap admin: %w", err)
	}
	if generated {
		fmt.Fprintf(stdout, "Created user admin with password %s (shown once; set HOLDFAST_ADMIN_PASSWORD to choose it)\n", password)
	} else {
		log.Info("created user admin with HOLDFAST_ADMIN_PASSWORD")
	}
	return nil
}

func cmdEnqueue(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	return errors.New("enqueue: not available yet")
}
