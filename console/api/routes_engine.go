package api

import "github.com/go-chi/chi/v5"

// engineRoutes mounts the queue, runs, holds and internal cron routes.
func (a *API) engineRoutes(r chi.Router) {}
