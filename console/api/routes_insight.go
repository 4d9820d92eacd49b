package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// insightRoutes mounts usage and the edges of understanding (SPEC §7, §10).
func (a *API) insightRoutes(r chi.Router) {
	r.Get("/edges", a.edgeList)
	r.Get("/usage", a.usageList)
}

// DefaultWindow is how far back edges and usage look when since is not
// given: a week, the window the weekly digest reports.
const DefaultWindow = 7 * 24 * time.Hour

// ParseSince reads a since parameter: an RFC 3339 time, or a duration back
// from now ("7d", "36h", "90m"); empty is DefaultWindow back from now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return now.Add(-DefaultWindow).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	d, err := workflow.EdgesWindow(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%w: since %q is neither an RFC 3339 time nor a duration back from now like 7d or 24h",
			ErrInvalid, v)
	}
	return now.Add(-d).UTC(), nil
}

// boundedParam reads an optional whole number in [lo, hi].
func boundedParam(q url.Values, name string, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s must be a whole number from %d to %d", ErrInvalid, name, lo, hi)
	}
	return n, nil
}

// EdgeView is one kind of edge as the API shows it: the store's report with
// a label saying what the kind is and, on each example, the console path
// it links.
type EdgeView struct {
	Kind   string            `json:"kind"`
	Source string            `json:"source"`
	Label  string            `json:"label"`
	Count  int64             `json:"count"`
	Latest []EdgeExampleView `json:"latest"`
}

// EdgeExampleView is an example and its link.
type EdgeExampleView struct {
	*store.EdgeExample
	Link string `json:"link,omitempty"`
}

// EdgeViews labels and links an edges report.
func EdgeViews(edges []*store.Edge) []*EdgeView {
	out := make([]*EdgeView, 0, len(edges))
	for _, e := range edges {
		v := &EdgeView{Kind: e.Kind, Source: e.Source, Label: engine.EdgeLabel(e.Kind), Count: e.Count,
			Latest: make([]EdgeExampleView, 0, len(e.Latest))}
		for _, ex := range e.Latest {
			_, link := engine.EdgeRef(e.Source, ex)
			v.Latest = append(v.Latest, EdgeExampleView{EdgeExample: ex, Link: link})
		}
		out = append(out, v)
	}
	return out
}

func (a *API) edgeList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := ParseSince(q.Get("since"), time.Now())
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
	WriteJSON(w, http.StatusOK, map[string]any{"since": since, "edges": EdgeViews(edges)})
}

func (a *API) usageList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := ParseSince(q.Get("since"), time.Now())
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
