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
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/allow"
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
	// CompareHash checks a password against its bcrypt hash; nil means
	// bcrypt.CompareHashAndPassword. Tests wrap the real one to count the
	// hashes a sign-in costs.
	CompareHash func(hash, password []byte) error
	// Slack answers Slack thread permalinks for session and hold pages;
	// nil (no Slack) shows no thread links.
	Slack Permalinker
}

// Console serves the web UI.
type Console struct {
	Deps
	links permalinks
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
	if d.CompareHash == nil {
		d.CompareHash = bcrypt.CompareHashAndPassword
	}
	return &Console{Deps: d}
}

func (c *Console) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(c.BaseURL, "https://")
}

// Handler returns the console's router; the server mounts it at /.
func (c *Console) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(c.securityHeaders, c.readInput)
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
		c.edgeRoutes(r)
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
			allow.Set(w, r)
			c.errorPage(w, r, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not allowed here.")
		})
	})
	return r
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.errorPage(w, r, http.StatusNotFound, "Not found", "There is nothing at "+r.URL.Path+".")
}

// securityHeaders sets what only the console knows: HSTS when it is served
// over https, and no caching of pages. The headers every response carries
// (nosniff, referrer policy, framing, the content security policy) are set
// once, for the whole router, by server.SecurityHeaders.
func (c *Console) securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if c.secureCookies(r) {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if !strings.HasPrefix(r.URL.Path, static.Prefix) {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}
