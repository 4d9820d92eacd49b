// Package server composes Holdfast's HTTP surface: health, metrics, the JSON
// API, the Slack endpoints and the console share one router.
package server

import (
	"crypto/subtle"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/store"
)

// Deps are the parts mounted on the router; nil parts are left out.
type Deps struct {
	Store store.Store
	API   *api.API
	// Metrics serves /metrics; guarded by InternalKey when that is set.
	Metrics     http.Handler
	InternalKey string
	// Slack serves /slack/* (HTTP mode).
	Slack http.Handler
	// Console serves every other path.
	Console http.Handler
}

// Handler returns the root handler.
func Handler(d Deps) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := d.Store.Ping(r.Context()); err != nil {
			api.WriteError(w, http.StatusServiceUnavailable, "store unavailable")
			return
		}
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if d.Metrics != nil {
		r.Get("/metrics", func(w http.ResponseWriter, r *http.Request) {
			if d.InternalKey != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+d.InternalKey)) != 1 {
				api.WriteError(w, http.StatusUnauthorized, "metrics need 'Authorization: Bearer <internal key>'")
				return
			}
			d.Metrics.ServeHTTP(w, r)
		})
	}
	if d.API != nil {
		r.Mount("/api", d.API.Routes())
	}
	if d.Slack != nil {
		r.Mount("/slack", d.Slack)
	}
	if d.Console != nil {
		r.Mount("/", d.Console)
	}
	return r
}
