package web

import (
	"errors"
	"net/http"
	"strings"

	"github.com/a-h/templ"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

func templSafe(s string) templ.SafeURL { return templ.SafeURL(s) }

func (c *Console) canEnqueue() bool { return c.Engine != nil }

// recentRuns lists the workflow's latest runs for its page.
func (c *Console) recentRuns(r *http.Request, wf *store.Workflow) []templates.RunRow {
	runs, err := c.Store.RunList(r.Context(), &store.RunListParams{Limit: 200})
	if err != nil {
		return nil
	}
	var out []templates.RunRow
	for _, run := range runs {
		if run.Command == wf.Command && len(out) < 10 {
			out = append(out, c.runRow(run))
		}
	}
	return out
}

// workflowEnqueue is the run-now form: a brief and an optional dedupe key.
// The item gets an engine-minted workflow session, where the run's
// progress appears; the browser is sent there.
func (c *Console) workflowEnqueue(w http.ResponseWriter, r *http.Request) {
	wf, err := c.workflowLookup(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	brief := strings.TrimSpace(r.PostFormValue("brief"))
	dedupe := strings.TrimSpace(r.PostFormValue("dedupe_key"))
	if c.Engine == nil {
		c.renderWorkflow(w, r, wf, http.StatusServiceUnavailable, brief, dedupe, "The workflow engine is not running.")
		return
	}
	if brief == "" {
		c.renderWorkflow(w, r, wf, http.StatusBadRequest, brief, dedupe, "Write a brief for the run.")
		return
	}
	item, created, err := c.Engine.Enqueue(r.Context(), engine.EnqueueParams{Command: wf.Command, DedupeKey: dedupe,
		Payload: map[string]any{"brief": brief, "title": firstLine(brief)}, OwnerUID: actorOf(r)})
	switch {
	case errors.Is(err, store.ErrConflict):
		c.renderWorkflow(w, r, wf, http.StatusConflict, brief, dedupe, store.ReasonOf(err))
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	to := "/runs"
	if item.SessionID != "" {
		to = string(sessionURL(item.SessionID))
	}
	msg := "Enqueued " + wf.Command + ": its progress appears below."
	if !created {
		msg = "An item with that dedupe key already exists; showing it instead."
	}
	c.redirect(w, r, to, msg, false)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	r := []rune(strings.TrimSpace(strings.TrimLeft(line, "# ")))
	if len(r) > 80 {
		r = r[:80]
	}
	return string(r)
}
