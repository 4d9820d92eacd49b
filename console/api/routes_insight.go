package api

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// insightRoutes mounts usage and the edges of understanding (SPEC §7, §10).
func (a *API) insightRoutes(r chi.Router) {
	r.Get("/edges", a.edgeList)
	r.Get("/usage", a.usageList)
}

// boundedParam reads an optional whole number in [lo, hi].
func boundedParam(q url.Values, name string, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, store.Refuse(store.ErrInvalid, "%s must be a whole number from %d to %d", name, lo, hi)
	}
	return n, nil
}

func (a *API) edgeList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := paging.Since(q.Get("since"), time.Now())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	latest, err := boundedParam(q, "latest", 1, 50)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	edges, err := a.Store.EdgeList(r.Context(), &store.EdgeListParams{Since: since, Latest: latest})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"since": since, "edges": engine.EdgeViews(edges)})
}

func (a *API) usageList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := paging.Since(q.Get("since"), time.Now())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	group := q.Get("groupBy")
	if group == "" {
		group = store.UsageByWorkflow
	}
	if !store.ValidUsageGroup(group) {
		WriteError(w, http.StatusBadRequest, "groupBy must be workflow, session or model")
		return
	}
	limit, err := boundedParam(q, "limit", 1, 1000)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	usage, err := a.Store.UsageList(r.Context(), &store.UsageListParams{Since: since, GroupBy: group, Limit: limit})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"since": since, "groupBy": group, "usage": usage})
}
