package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/search"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

func memoURL(id string) templ.SafeURL { return templ.SafeURL("/memos/" + id) }

// snippet is the first words of a memo body as text, without its markup.
// Only the body's first snippetSource bytes (cut at a line) are read: a
// page lists up to 50 memos of up to 1 MiB each.
func snippet(body string, n int) string {
	if len(body) > snippetSource {
		if i := strings.LastIndexByte(body[:snippetSource], '\n'); i > 0 {
			body = body[:i]
		} else {
			cut := snippetSource
			for cut > 0 && !utf8.RuneStart(body[cut]) {
				cut--
			}
			body = body[:cut]
		}
	}
	s := workflow.PlainText([]byte(body))
	if utf8.RuneCountInString(s) > n {
		s = strings.TrimSpace(string([]rune(s)[:n])) + "…"
	}
	return s
}

const snippetSource = 4 << 10

// memoPage is the library's page size when the search box is empty.
const memoPage = 50

// maxMemoPages bounds ?page=, so no request asks the store to skip past
// what anyone pages through.
const maxMemoPages = 1000

func (c *Console) memoList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := templates.MemosView{Query: strings.TrimSpace(q.Get("q")), MemoType: q.Get("type"), PageNo: 1}
	// The search box takes the query grammar of SPEC §4.1; the type select,
	// when set, is the query's type: (a bad filter is a 400 naming it), and
	// a limit:<n> is the page size.
	sq, err := search.Parse(v.Query)
	if err == nil {
		err = sq.SetType(v.MemoType)
	}
	if err == nil && q.Has("page") {
		n, perr := strconv.Atoi(q.Get("page"))
		if perr != nil || n < 1 || n > maxMemoPages {
			err = store.Refuse(store.ErrInvalid, "page must be a number from 1 to %d", maxMemoPages)
		}
		v.PageNo = n
	}
	if status, ok := refusalStatus(err); ok {
		// The search page again, the query in its box and the reason
		// beside it, so that it can be mended rather than retyped.
		v.Error, v.PageNo = store.ReasonOf(err), 1
		v.Page = c.page(w, r, "Memos", "memos")
		c.render(w, r, status, templates.MemosPage(v))
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	p := sq.ListParams(time.Now(), memoPage) // a search pages by its limit
	size := p.Limit
	p.Limit, p.Offset = size+1, (v.PageNo-1)*size
	p.IncludeUnlisted = identity(r).ListsUnlisted()
	memos, err := c.Store.MemoSearch(r.Context(), p)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	pageURL := func(n int) templ.SafeURL {
		u := url.Values{}
		if v.Query != "" {
			u.Set("q", v.Query)
		}
		if v.MemoType != "" {
			u.Set("type", v.MemoType)
		}
		if n > 1 {
			u.Set("page", strconv.Itoa(n))
		}
		if len(u) == 0 {
			return "/memos"
		}
		return templ.SafeURL("/memos?" + u.Encode())
	}
	if len(memos) > size {
		memos = memos[:size]
		v.NextURL = pageURL(v.PageNo + 1)
	}
	if v.PageNo > 1 {
		v.PrevURL = pageURL(v.PageNo - 1)
	}
	for _, m := range memos {
		v.Rows = append(v.Rows, templates.MemoRow{ID: m.ID, URL: memoURL(m.ID), Title: m.Title, Snippet: snippet(m.Body, 160),
			MemoType: m.MemoType, Tags: m.Tags, Unlisted: m.Unlisted, Updated: c.ago(m.UpdatedAt)})
	}
	v.Page = c.page(w, r, "Memos", "memos")
	c.render(w, r, http.StatusOK, templates.MemosPage(v))
}

// canEditMemo: stewards edit notes; workflow memos are for admins, as on
// the API.
func canEditMemo(id *auth.Identity, m *store.Memo) bool {
	if m.MemoType == store.MemoTypeWorkflow {
		return id.AtLeast(store.RoleAdmin)
	}
	return id.AtLeast(store.RoleSteward)
}

func (c *Console) memoShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	m, err := c.Store.MemoGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := templates.MemoView{ID: m.ID, Title: m.Title, MemoType: m.MemoType, Tags: m.Tags, Notes: m.Notes, Unlisted: m.Unlisted,
		Version: m.ContentVersion, Created: c.ago(m.CreatedAt), Updated: c.ago(m.UpdatedAt), HTML: renderMarkdown(m.Body),
		CanEdit: canEditMemo(identity(r), m), EditURL: templ.SafeURL("/memos/" + m.ID + "/edit")}
	if m.MemoType == store.MemoTypeWorkflow {
		if wf, err := c.Store.WorkflowGetByMemoID(ctx, m.ID); err == nil {
			v.Workflow = &templates.Link{Label: workflowLabel(wf), URL: workflowURL(wf)}
			if len(wf.Errors) > 0 {
				v.WorkflowErrors = compileSummary(wf.Errors)
			}
		}
	}
	if v.Provenance, err = c.provenance(ctx, m); err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, m.Title, "memos")
	c.render(w, r, http.StatusOK, templates.MemoPage(v))
}

// provenance is the run that last published m, its hold and the steward who
// approved it; nil for a memo no run wrote.
func (c *Console) provenance(ctx context.Context, m *store.Memo) (*templates.Provenance, error) {
	runs, err := c.Store.RunListByDispatchMemo(ctx, m.ID, 10)
	if err != nil || len(runs) == 0 {
		return nil, err
	}
	run := runs[0]
	p := &templates.Provenance{Run: templates.Link{Label: engine.RunTitle(run), URL: runURL(run.ID)}, Workflow: run.Command,
		Earlier: len(runs) - 1}
	if run.HoldID != "" {
		h, err := c.Store.HoldGetByID(ctx, run.HoldID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if h != nil {
			p.Hold = &templates.Link{Label: engine.HoldTitle(h, run.Payload), URL: holdURL(h.ID)}
			if h.Status == store.HoldApproved {
				names := c.userNames(ctx)
				p.Steward, p.Via, p.Edited = approvers(h, names), h.DecidedVia, h.EditedOutput != nil
				p.EditedBy = editor(h, names)
				if h.DecidedAt != nil {
					p.When = c.ago(*h.DecidedAt)
				}
			}
		}
	}
	return p, nil
}

// memoDraft is a losing edit kept across the redirect to the conflict page.
type memoDraft struct {
	MemoID      string `json:"memoId"`
	BaseVersion int64  `json:"baseVersion"`
	Title       string `json:"title"`
	Body        string `json:"body"`
	Notes       string `json:"notes"`
}

func (c *Console) memoEditForm(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	m, err := c.Store.MemoGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if !canEditMemo(identity(r), m) {
		c.errorPage(w, r, http.StatusForbidden, "Not allowed", "Stewards edit memos; workflow memos are edited by admins.")
		return
	}
	v := memoEditView(m, m.Title, m.Body, m.Notes, m.ContentVersion)
	if id := r.URL.Query().Get("draft"); id != "" {
		d, err := c.Store.ConsoleDraftGetByID(ctx, id, from(ctx).session.ID)
		var draft memoDraft
		switch {
		case errors.Is(err, store.ErrNotFound):
			v.Error = "Your unsaved text is no longer kept (drafts last a day, and only in the sign-in that wrote them). This is the current version."
		case err != nil:
			c.fail(w, r, err)
			return
		case json.Unmarshal([]byte(d.Body), &draft) != nil || draft.MemoID != m.ID:
			v.Error = "That draft is not of this memo."
		default:
			// The form carries the caller's text against the current
			// version: saving it now is a deliberate overwrite.
			v.Conflict = &templates.MemoConflict{YourBase: draft.BaseVersion, Version: m.ContentVersion, Title: m.Title, Body: m.Body,
				Diff: lineDiff(m.Body, draft.Body)}
			v.Title, v.Body, v.Notes = draft.Title, draft.Body, draft.Notes
		}
	}
	v.Page = c.page(w, r, "Edit "+m.Title, "memos")
	c.render(w, r, http.StatusOK, templates.MemoEditPage(v))
}

// memoEditView is the edit form of m filled with the given text.
func memoEditView(m *store.Memo, title, body, notes string, version int64) templates.MemoEditView {
	return templates.MemoEditView{ID: m.ID, URL: memoURL(m.ID), Action: "/memos/" + m.ID + "/edit", Title: title, Body: body,
		Notes: notes, Version: version}
}

// memoEdit saves a memo with compare-and-set on its version. A lost race
// keeps the caller's text as a draft and redirects to the edit page showing
// both versions (post/redirect/get: that page can be reloaded).
func (c *Console) memoEdit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	m, err := c.Store.MemoGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	back := "/memos/" + m.ID + "/edit"
	if !canEditMemo(identity(r), m) {
		c.errorPage(w, r, http.StatusForbidden, "Not allowed", "Stewards edit memos; workflow memos are edited by admins.")
		return
	}
	expected, err := strconv.ParseInt(r.PostFormValue("expected_version"), 10, 64)
	if err != nil {
		c.redirect(w, r, back, "The form lost its version; open the memo and edit it again.", true)
		return
	}
	title := strings.TrimSpace(r.PostFormValue("title"))
	body := strings.ReplaceAll(r.PostFormValue("body"), "\r\n", "\n")
	notes := strings.TrimSpace(r.PostFormValue("notes"))
	compiledBefore := c.compilingWorkflows(ctx)
	up, err := c.Library.Update(ctx, library.UpdateParams{ID: m.ID, ExpectedVersion: expected, Title: &title, Body: body, Notes: &notes})
	switch {
	case errors.Is(err, store.ErrConflict):
		b, _ := json.Marshal(memoDraft{MemoID: m.ID, BaseVersion: expected, Title: title, Body: body, Notes: notes})
		id := store.NewID("drf")
		if err := c.Store.ConsoleDraftCreate(ctx, &store.ConsoleDraft{ID: id, SessionID: from(ctx).session.ID, Body: string(b)}); err != nil {
			c.fail(w, r, err)
			return
		}
		c.redirect(w, r, back+"?draft="+id+"#conflict", "", false)
		return
	case errors.Is(err, store.ErrInvalid):
		// Refused as sent (a blank title, a body past 1 MiB): the form
		// again with the caller's text, which no redirect could carry.
		status, _ := refusalStatus(err)
		v := memoEditView(m, title, body, notes, expected)
		v.Error = store.ReasonOf(err)
		v.Page = c.page(w, r, "Edit "+m.Title, "memos")
		c.render(w, r, status, templates.MemoEditPage(v))
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	saved := "Saved: version " + strconv.FormatInt(up.ContentVersion, 10)
	if up.MemoType == store.MemoTypeWorkflow {
		// A workflow memo is saved whether or not it compiles (it is text
		// first), but a broken one takes no runs: say so where the errors
		// are marked beside the source.
		if wf, err := c.Store.WorkflowGetByMemoID(ctx, up.ID); err == nil && len(wf.Errors) > 0 {
			c.redirect(w, r, string(workflowURL(wf)), saved+", but "+workflowLabel(wf)+" "+compileSummary(wf.Errors)+
				", so it takes no runs until it is fixed.", true)
			return
		}
	}
	// Workflows name memos (a Gate, a Hook) by title: a rename, or an edit of
	// one such memo, can leave them broken, which the writer must hear now.
	var broke []string
	compiledAfter := c.compilingWorkflows(ctx)
	for cmd := range compiledBefore {
		if !compiledAfter[cmd] {
			broke = append(broke, cmd)
		}
	}
	if len(broke) > 0 {
		slices.Sort(broke)
		verb := " no longer compiles"
		if len(broke) > 1 {
			verb = " no longer compile"
		}
		c.redirect(w, r, "/memos/"+up.ID, saved+", but "+strings.Join(broke, " and ")+verb+
			" (a workflow names memos by title), so it takes no runs until the workflow or this memo is mended.", true)
		return
	}
	c.redirect(w, r, "/memos/"+up.ID, saved+".", false)
}

// compilingWorkflows is the set of workflow commands that compile now.
func (c *Console) compilingWorkflows(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	wfs, err := c.Store.WorkflowList(ctx)
	if err != nil {
		return out
	}
	for _, wf := range wfs {
		if wf.Command != "" && len(wf.Errors) == 0 {
			out[wf.Command] = true
		}
	}
	return out
}

// compileSummary says how a workflow fails to compile, naming the first
// error's line.
func compileSummary(errs []store.CompileError) string {
	n := "1 error"
	if len(errs) > 1 {
		n = strconv.Itoa(len(errs)) + " errors"
	}
	return fmt.Sprintf("does not compile: %s (line %d: %s)", n, errs[0].Line, errs[0].Message)
}
