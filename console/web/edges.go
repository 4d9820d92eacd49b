package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

// edgeWindows are the windows the Edges page offers; the API takes any.
var edgeWindows = []string{"24h", "7d", "30d"}

func (c *Console) edgeRoutes(r chi.Router) {
	r.Get("/edges", c.edgeList)
}

// edgeList shows the edges of understanding over a window, and what the
// window's runs spent, per workflow and per model.
func (c *Console) edgeList(w http.ResponseWriter, r *http.Request) {
	window := r.URL.Query().Get("since")
	if window == "" {
		window = "7d"
	}
	since, err := paging.Since(window, c.Now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	edges, err := c.Store.EdgeList(r.Context(), &store.EdgeListParams{Since: since})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	names := c.userNames(r.Context())
	v := templates.EdgesView{Page: c.page(w, r, "Edges of understanding", "edges"), Window: window}
	for _, win := range edgeWindows {
		v.Windows = append(v.Windows, templates.OriginToggle{Label: win, On: win == window,
			URL: templ.SafeURL("/edges?since=" + url.QueryEscape(win))})
	}
	for _, e := range engine.EdgeViews(edges) {
		g := templates.EdgeGroup{Kind: e.Kind, Label: e.Label, Count: e.Count}
		for _, ex := range e.Latest {
			it := templates.EdgeItem{At: c.ago(ex.At), Command: ex.Command, By: requester(ex.By, names), Message: peopleIn(ex.Message, names),
				URL: templ.SafeURL(ex.Link)}
			it.Ref = firstOf(ex.RunID, ex.HoldID, ex.WorkflowMemoID, ex.SessionID, ex.Key)
			if e.Source == store.EdgeSourceHold || e.Source == store.EdgeSourceDecision {
				it.Ref = firstOf(ex.HoldID, ex.RunID)
			}
			g.Latest = append(g.Latest, it)
		}
		v.Edges = append(v.Edges, g)
		v.Total += e.Count
	}
	for _, u := range []struct{ title, group string }{{"Tokens by workflow", store.UsageByWorkflow}, {"Tokens by model", store.UsageByModel}} {
		rows, err := c.Store.UsageList(r.Context(), &store.UsageListParams{Since: since, GroupBy: u.group, Limit: 20})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		t := templates.UsageTable{Title: u.title}
		for _, row := range rows {
			ur := templates.UsageRow{Key: row.Key, Runs: row.Runs, TokensIn: row.TokensIn, TokensOut: row.TokensOut}
			if u.group == store.UsageByWorkflow && row.Key != "" {
				ur.URL = templ.SafeURL("/workflows/" + strings.TrimPrefix(row.Key, "/"))
			}
			if ur.Key == "" {
				ur.Key = "(default model)"
			}
			t.Rows = append(t.Rows, ur)
		}
		v.Usage = append(v.Usage, t)
	}
	c.render(w, r, http.StatusOK, templates.EdgesPage(v))
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
