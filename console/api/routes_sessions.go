package api

import "github.com/go-chi/chi/v5"

// sessionRoutes mounts the sessions routes and /api/internal/sessions.
func (a *API) sessionRoutes(r chi.Router) {}
