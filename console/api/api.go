// Package api is Holdfast's JSON API (SPEC §7). Handlers are thin: they
// decode, call the engine or the library, and encode.
package api

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/allow"
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
	r.Use(limitBody, checkQuery, joinTrace)
	// Internal routes authenticate with x-internal-key, not an API key.
	r.Route("/internal", func(r chi.Router) {
		r.Use(a.requireInternalKey, a.optionalKey, a.trackSession)
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
		allow.Set(w, r)
		WriteError(w, http.StatusMethodNotAllowed, "method not allowed: "+r.Method+" "+r.URL.Path)
	})
	return r
}

// bearer authenticates the request's API key, writing 401 itself when it
// is malformed or unknown.
func (a *API) bearer(w http.ResponseWriter, r *http.Request, h string) (*auth.Identity, bool) {
	key, ok := auth.BearerToken(h)
	if !ok {
		WriteError(w, http.StatusUnauthorized, "Authorization must be 'Bearer <api key>'")
		return nil, false
	}
	k, err := a.Store.APIKeyGetByHash(r.Context(), auth.HashKey(key))
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, http.StatusUnauthorized, "unknown API key")
		return nil, false
	} else if err != nil {
		Fail(w, r, a.Log, err)
		return nil, false
	}
	return &auth.Identity{KeyID: k.ID, KeyName: k.Name, Role: k.Role}, true
}

// optionalKey authenticates an API key sent beside the internal key, so an
// agent can create its session as its own key (see internalSessionCreate).
func (a *API) optionalKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			id, ok := a.bearer(w, r, h)
			if !ok {
				return
			}
			r = r.WithContext(auth.With(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate accepts a bearer API key or, failing that, a console cookie
// (with CSRF checked on state-changing methods).
func (a *API) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			id, ok := a.bearer(w, r, h)
			if !ok {
				return
			}
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

// require refuses callers below role min with 403.
func (a *API) require(min string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !auth.From(r.Context()).AtLeast(min) {
				WriteError(w, http.StatusForbidden, "this needs the "+min+" role")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
