// Package api is Holdfast's JSON API (SPEC §7). Handlers are thin: they
// decode, call the engine or the library, and encode.
package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// Deps are what the API calls.
type Deps struct {
	Store   store.Store
	Library *library.Service
	Log     *slog.Logger
	// Cookie authenticates a console cookie, answering nil when there is
	// none. Optional: without it only API keys are accepted.
	Cookie func(r *http.Request) *auth.Identity
	// CSRF checks a cookie-authenticated state-changing request, the same
	// check console forms get. Required when Cookie is set.
	CSRF func(r *http.Request) error
	// Engine enqueues, decides holds and runs cron passes. Optional: without
	// it those routes answer 503.
	Engine *engine.Engine
	// Sessions is the session runtime behind /api/sessions.
	Sessions *sessions.Service
	// InternalKey guards /api/internal/*; empty, those routes answer 404.
	InternalKey string
}

// API serves /api.
type API struct {
	Deps
}

// New returns the API.
func New(d Deps) *API {
	return &API{Deps: d}
}

// Routes returns the /api router; mount it at /api.
func (a *API) Routes() http.Handler {
	r := chi.NewRouter()
	r.Use(joinTrace)
	// Internal routes authenticate with x-internal-key, not an API key.
	r.Route("/internal", func(r chi.Router) {
		r.Use(a.requireInternalKey, a.trackSession)
		a.sessionInternalRoutes(r)
		a.engineInternalRoutes(r)
	})
	r.Group(func(r chi.Router) {
		r.Use(a.authenticate, a.trackSession)
		r.Route("/memos", func(r chi.Router) {
			r.Get("/", a.memoList)
			r.With(a.require(store.RoleSteward)).Post("/", a.memoCreate)
			r.Get("/{id}", a.memoGet)
			r.With(a.require(store.RoleSteward)).Put("/{id}", a.memoUpdate)
		})
		r.Get("/workflows", a.workflowList)
		a.engineRoutes(r)
		a.sessionRoutes(r)
		a.insightRoutes(r)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusMethodNotAllowed, "method not allowed: "+r.Method+" "+r.URL.Path)
	})
	return r
}

// authenticate accepts a bearer API key or, failing that, a console cookie
// (with CSRF checked on state-changing methods).
func (a *API) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			key, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || key == "" {
				WriteError(w, http.StatusUnauthorized, "Authorization must be 'Bearer <api key>'")
				return
			}
			k, err := a.Store.APIKeyGetByHash(r.Context(), auth.HashKey(key))
			if errors.Is(err, store.ErrNotFound) {
				WriteError(w, http.StatusUnauthorized, "unknown API key")
				return
			} else if err != nil {
				Fail(w, r, a.Log, err)
				return
			}
			id := &auth.Identity{KeyID: k.ID, Role: k.Role}
			next.ServeHTTP(w, r.WithContext(auth.With(r.Context(), id)))
			return
		}
		if a.Cookie != nil {
			if id := a.Cookie(r); id != nil {
				if !safeMethod(r.Method) {
					if err := a.CSRF(r); err != nil {
						WriteError(w, http.StatusForbidden, err.Error())
						return
					}
				}
				next.ServeHTTP(w, r.WithContext(auth.With(r.Context(), id)))
				return
			}
		}
		WriteError(w, http.StatusUnauthorized, "authentication required: send 'Authorization: Bearer <api key>'")
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

var roleRank = map[string]int{store.RoleViewer: 1, store.RoleSteward: 2, store.RoleAdmin: 3}

// AtLeast reports whether id holds role min or a stronger one.
func AtLeast(id *auth.Identity, min string) bool {
	return id != nil && roleRank[id.Role] >= roleRank[min]
}

// require refuses callers below role min with 403.
func (a *API) require(min string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !AtLeast(auth.From(r.Context()), min) {
				WriteError(w, http.StatusForbidden, "this needs the "+min+" role")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
