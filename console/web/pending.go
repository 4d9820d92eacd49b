package web

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

// The pages below are wired to the engine and sessions service as they land.

func (c *Console) canEnqueue() bool                      { return false }
func (c *Console) openHoldCount(ctx context.Context) int { return 0 }
func (c *Console) recentRuns(r *http.Request, wf *store.Workflow) []templates.RunRow {
	return nil
}

func (c *Console) workflowEnqueue(w http.ResponseWriter, r *http.Request) {
	c.errorPage(w, r, http.StatusServiceUnavailable, "Not available", "The engine is not running.")
}

func (c *Console) holdRoutes(r chi.Router) {}
func (c *Console) runRoutes(r chi.Router)  {}

func (c *Console) sessionOpenHolds(ctx context.Context, sessionID string) []templates.Link {
	return nil
}
func (c *Console) holdCardStatus(ctx context.Context, card *templates.HoldCard, holdID string) {}
