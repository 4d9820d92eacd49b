package web

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

// workflowURL names a workflow by its command without the slash, or by
// memo id for a broken memo that has no command.
func workflowURL(wf *store.Workflow) templ.SafeURL {
	if wf.Command != "" {
		return templ.SafeURL("/workflows/" + strings.TrimPrefix(wf.Command, "/"))
	}
	return templ.SafeURL("/workflows/" + wf.MemoID)
}

func workflowLabel(wf *store.Workflow) string {
	if wf.Command != "" {
		return wf.Command
	}
	return wf.Title
}

func (c *Console) workflowList(w http.ResponseWriter, r *http.Request) {
	wfs, err := c.Store.WorkflowList(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var v templates.WorkflowsView
	for _, wf := range wfs {
		v.Rows = append(v.Rows, templates.WorkflowRow{Command: workflowLabel(wf), URL: workflowURL(wf), Title: wf.Title,
			Summary: wf.Summary, Invoke: wf.Invoke, Status: wf.Status, Errors: len(wf.Errors)})
	}
	v.Page = c.page(w, r, "Workflows", "workflows")
	c.render(w, r, http.StatusOK, templates.WorkflowsPage(v))
}

// workflowLookup resolves {command}: "draft-memo" → "/draft-memo", or a
// memo id for a workflow without a command.
func (c *Console) workflowLookup(r *http.Request) (*store.Workflow, error) {
	key := chi.URLParam(r, "command")
	wf, err := c.Store.WorkflowGetByCommand(r.Context(), "/"+strings.TrimPrefix(key, "/"))
	if errors.Is(err, store.ErrNotFound) && strings.HasPrefix(key, "mem_") {
		return c.Store.WorkflowGetByMemoID(r.Context(), key)
	}
	return wf, err
}

func (c *Console) workflowShow(w http.ResponseWriter, r *http.Request) {
	wf, err := c.workflowLookup(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	c.renderWorkflow(w, r, wf, http.StatusOK, q.Get("brief"), q.Get("dedupe_key"), "")
}

func (c *Console) renderWorkflow(w http.ResponseWriter, r *http.Request, wf *store.Workflow, status int, brief, dedupe, runErr string) {
	m, err := c.Store.MemoGetByID(r.Context(), wf.MemoID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	id := identity(r)
	base := string(workflowURL(wf))
	v := templates.WorkflowView{Command: workflowLabel(wf), Title: wf.Title, MemoURL: memoURL(wf.MemoID), Summary: wf.Summary,
		Invoke: wf.Invoke, Status: wf.Status, CanAdmin: id.AtLeast(store.RoleAdmin),
		// Only a live workflow takes items: a paused or broken one's page
		// says so (its status, its compile errors) instead of a form that
		// could only be refused, unless it answers such a refusal.
		CanRun: id.AtLeast(store.RoleSteward) && wf.Command != "" && c.canEnqueue() &&
			(wf.Status == workflow.StatusLive && len(wf.Errors) == 0 || runErr != ""),
		RunNowURL: base + "/enqueue", StatusURL: base + "/status", Brief: brief, DedupeKey: dedupe, RunNowError: runErr}
	usage, err := c.Store.UsageList(r.Context(), &store.UsageListParams{Since: c.Now().Add(-7 * 24 * time.Hour), GroupBy: store.UsageByWorkflow, Limit: 500})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Usage = usagePhrase(sumUsage(usage, func(u *store.Usage) bool { return u.Key == wf.Command }), "")
	// Compile afresh: Gate and Hook memos may have appeared or gone since
	// the memo was last written, and the page must show what a run would see.
	man, errs := c.Library.Compile(r.Context(), m.Body)
	v.Replies = man.Replies()
	byLine := map[int][]string{}
	for _, e := range errs {
		byLine[e.Line] = append(byLine[e.Line], e.Message)
	}
	for i, text := range strings.Split(m.Body, "\n") {
		l := templates.SourceLine{N: i + 1, Text: text, Errors: byLine[i+1]}
		delete(byLine, i+1)
		v.Source = append(v.Source, l)
		if len(l.Errors) > 0 {
			v.Errors = append(v.Errors, l)
		}
	}
	for n, msgs := range byLine { // errors past the last line, if any
		v.Errors = append(v.Errors, templates.SourceLine{N: n, Errors: msgs})
	}
	v.Recent = c.recentRuns(r, wf)
	v.Page = c.page(w, r, workflowLabel(wf), "workflows")
	c.render(w, r, status, templates.WorkflowPage(v))
}

func (c *Console) workflowStatus(w http.ResponseWriter, r *http.Request) {
	wf, err := c.workflowLookup(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	to := r.PostFormValue("status")
	if to != workflow.StatusLive && to != workflow.StatusPaused {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "status must be live or paused")
		return
	}
	if wf.Status != workflow.StatusLive && wf.Status != workflow.StatusPaused {
		c.redirect(w, r, string(workflowURL(wf)), "A "+wf.Status+" workflow cannot be paused or resumed; fix its memo first.", true)
		return
	}
	if _, err := c.Store.WorkflowStatusSet(r.Context(), wf.MemoID, to); err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, string(workflowURL(wf)), wf.Command+" is now "+to+".", false)
}
