package web

import (
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
// progress appears; the browser is sent there. A reply workflow answers in
// a conversation, so for it the brief opens a console session as the
// command "/<command> <brief>", which the session's turn enqueues there.
func (c *Console) workflowEnqueue(w http.ResponseWriter, r *http.Request) {
	wf, err := c.workflowLookup(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	brief := strings.TrimSpace(r.PostFormValue("brief"))
	dedupe := strings.TrimSpace(r.PostFormValue("dedupe_key"))
	// A refusal answers with the workflow page itself, the form as it was
	// sent: nothing typed is lost, however long.
	again := func(status int, msg string) {
		c.renderWorkflow(w, r, wf, status, brief, dedupe, msg)
	}
	switch {
	case c.Engine == nil:
		again(http.StatusServiceUnavailable, "The workflow engine is not running.")
		return
	case brief == "":
		again(http.StatusBadRequest, "Write a brief for the run.")
		return
	}
	if c.replies(r, wf) {
		c.runInConversation(w, r, wf, brief, again)
		return
	}
	item, created, err := c.Engine.Enqueue(r.Context(), engine.EnqueueParams{Command: wf.Command, DedupeKey: dedupe,
		Payload: map[string]any{"brief": brief}, OwnerUID: actorOf(r)})
	if status, ok := refusalStatus(err); ok {
		again(status, store.ReasonOf(err))
		return
	} else if err != nil {
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

// replies says whether the workflow's current memo compiles to a manifest
// with destination reply.
func (c *Console) replies(r *http.Request, wf *store.Workflow) bool {
	m, err := c.Store.MemoGetByID(r.Context(), wf.MemoID)
	if err != nil {
		return false
	}
	man, _ := c.Library.Compile(r.Context(), m.Body)
	return man.Replies()
}

// runInConversation opens a console session with the brief as its first
// message, a slash command the session's turn enqueues in that session.
func (c *Console) runInConversation(w http.ResponseWriter, r *http.Request, wf *store.Workflow, brief string, again func(int, string)) {
	text := wf.Command + " " + brief
	if err := store.CheckText("brief", text, 0); err != nil {
		again(http.StatusBadRequest, store.ReasonOf(err))
		return
	}
	s, err := c.openSession(r, wf.Command+": "+engine.FirstLine(strings.TrimLeft(strings.TrimSpace(brief), "# "), 80))
	if status, ok := refusalStatus(err); ok {
		again(status, store.ReasonOf(err))
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	back := string(sessionURL(s.ID))
	if _, err := c.Sessions.Message(r.Context(), s.ID, text, identity(r).Caller(), true); err != nil {
		c.sessionFail(w, r, back, err)
		return
	}
	c.redirect(w, r, back, "Started "+wf.Command+" in a new session: its reply appears below.", false)
}
