package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

func templSafe(s string) templ.SafeURL { return templ.SafeURL(s) }

// maxBriefInURL bounds a brief carried back to the form in a redirect's URL.
const maxBriefInURL = 4000

func (c *Console) canEnqueue() bool { return c.Engine != nil }

// recentRuns lists the workflow's latest runs for its page.
func (c *Console) recentRuns(r *http.Request, wf *store.Workflow) []templates.RunRow {
	if wf.Command == "" {
		return nil
	}
	runs, err := c.Store.RunList(r.Context(), &store.RunListParams{Command: wf.Command, Limit: 10})
	if err != nil {
		return nil
	}
	var out []templates.RunRow
	for _, run := range runs {
		out = append(out, c.runRow(run))
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
	// Every refusal goes back to the workflow page (post/redirect/get) with
	// the form's text in the URL, so nothing typed is lost and the page
	// can be reloaded.
	again := func(msg string) {
		q := url.Values{}
		if len(brief) <= maxBriefInURL {
			q.Set("brief", brief)
		}
		if dedupe != "" {
			q.Set("dedupe_key", dedupe)
		}
		to := string(workflowURL(wf))
		if len(q) > 0 {
			to += "?" + q.Encode()
		}
		c.redirect(w, r, to+"#run-now", msg, true)
	}
	if c.Engine == nil {
		again("The workflow engine is not running.")
		return
	}
	if brief == "" {
		again("Write a brief for the run.")
		return
	}
	item, created, err := c.Engine.Enqueue(r.Context(), engine.EnqueueParams{Command: wf.Command, DedupeKey: dedupe,
		Payload: map[string]any{"brief": brief, "title": firstLine(brief)}, OwnerUID: actorOf(r)})
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrForbidden):
		again(store.ReasonOf(err))
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
