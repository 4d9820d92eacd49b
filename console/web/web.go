// Package web is the moderation console (SPEC §6): server-rendered pages
// over chi and templ, signed in with server-side sessions, CSRF-checked on
// every state change. Handlers build view models (package templates) and
// never put logic in templates; every decision goes through the engine, the
// same call Slack and the API make.
package web

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/static"
	"github.com/holdfast-bot/holdfast/store"
)

// Deps are what the console calls.
type Deps struct {
	Store   store.Store
	Library *library.Service
	// Sessions is the session runtime: every session read and action.
	Sessions *sessions.Service
	// Engine decides holds and enqueues run-now items; nil while no engine
	// runs (those actions then answer 503).
	Engine *engine.Engine
	Log    *slog.Logger
	// BaseURL is the public URL (HOLDFAST_BASE_URL). Under https the cookie
	// is Secure, and its origin is accepted for state-changing requests.
	BaseURL string
	// SessionTTL is how long a sign-in lasts (default 7 days).
	SessionTTL time.Duration
	// Now is the clock (tests may pin it); nil means time.Now.
	Now func() time.Time
	// Slack answers Slack thread permalinks for session and hold pages;
	// nil (no Slack) shows no thread links.
	Slack Permalinker
}

// Console serves the web UI.
type Console struct {
	Deps
	throttle *throttle
	links    permalinks
}

// New returns the console.
func New(d Deps) *Console {
	if d.SessionTTL <= 0 {
		d.SessionTTL = 7 * 24 * time.Hour
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return &Console{Deps: d, throttle: newThrottle(5, 15*time.Minute, d.Now)}
}

func (c *Console) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(c.BaseURL, "https://")
}

// Handler returns the console's router; the server mounts it at /.
func (c *Console) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(c.securityHeaders)
	r.Handle(static.Prefix+"*", static.Handler())
	r.Get("/favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, static.URL("favicon.svg"), http.StatusMovedPermanently)
	})
	r.Get("/login", c.loginForm)
	r.Post("/login", c.login)

	r.Group(func(r chi.Router) {
		r.Use(c.requireSession)
		r.Use(c.csrfMiddleware)
		r.Post("/logout", c.logout)
		r.Get("/", c.home)
		c.sessionRoutes(r)
		c.holdRoutes(r)
		c.runRoutes(r)
		r.Get("/workflows", c.workflowList)
		r.Get("/workflows/{command}", c.workflowShow)
		r.With(c.requireRole(store.RoleAdmin)).Post("/workflows/{command}/status", c.workflowStatus)
		r.With(c.requireRole(store.RoleSteward)).Post("/workflows/{command}/enqueue", c.workflowEnqueue)
		r.Get("/memos", c.memoList)
		r.Get("/memos/{id}", c.memoShow)
		r.With(c.requireRole(store.RoleSteward)).Get("/memos/{id}/edit", c.memoEditForm)
		r.With(c.requireRole(store.RoleSteward)).Post("/memos/{id}/edit", c.memoEdit)
		r.Route("/users", func(r chi.Router) {
			r.Use(c.requireRole(store.RoleAdmin))
			r.Get("/", c.userList)
			r.Post("/", c.userCreate)
			r.Post("/{id}/role", c.userRole)
			r.Post("/{id}/disabled", c.userDisabled)
			r.Post("/{id}/password", c.userPassword)
		})
		r.NotFound(c.notFound)
		r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
			c.errorPage(w, r, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not allowed here.")
		})
	})
	return r
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.errorPage(w, r, http.StatusNotFound, "Not found", "There is nothing at "+r.URL.Path+".")
}

// securityHeaders sets the headers every console response carries. The CSP
// allows no inline script or style at all, so no nonce is needed: every
// script is a same-origin file and every hook a data- attribute.
func (c *Console) securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if c.secureCookies(r) {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, static.Prefix) {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}
