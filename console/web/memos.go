package web

import (
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

func memoURL(id string) templ.SafeURL { return templ.SafeURL("/memos/" + id) }

// snippet is the first words of a memo body, markdown markers dropped.
func snippet(body string, n int) string {
	var b strings.Builder
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "#>-*0123456789. `"))
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(line)
		if b.Len() >= n {
			break
		}
	}
	s := b.String()
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (c *Console) memoList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := templates.MemosView{Query: strings.TrimSpace(q.Get("q")), MemoType: q.Get("type")}
	if v.MemoType != "" && !slices.Contains(library.MemoTypes, v.MemoType) {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "type must be one of "+strings.Join(library.MemoTypes, ", ")+".")
		return
	}
	// Unlisted memos are listed for stewards and admins only (SPEC §7).
	memos, err := c.Store.MemoSearch(r.Context(), &store.MemoSearchParams{Query: v.Query, MemoType: v.MemoType,
		IncludeUnlisted: identity(r).AtLeast(store.RoleSteward), Limit: 100})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, m := range memos {
		v.Rows = append(v.Rows, templates.MemoRow{ID: m.ID, URL: memoURL(m.ID), Title: m.Title, Snippet: snippet(m.Body, 160),
			MemoType: m.MemoType, Tags: m.Tags, Unlisted: m.Unlisted, Updated: c.ago(m.UpdatedAt)})
	}
	v.Page = c.page(w, r, "Memos", "memos")
	c.render(w, r, http.StatusOK, templates.MemosPage(v))
}

func (c *Console) memoShow(w http.ResponseWriter, r *http.Request) {
	m, err := c.Store.MemoGetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := templates.MemoView{ID: m.ID, Title: m.Title, MemoType: m.MemoType, Tags: m.Tags, Notes: m.Notes, Unlisted: m.Unlisted,
		Version: m.ContentVersion, Created: c.ago(m.CreatedAt), Updated: c.ago(m.UpdatedAt), HTML: renderMarkdown(m.Body)}
	if m.MemoType == store.MemoTypeWorkflow {
		if wf, err := c.Store.WorkflowGetByMemoID(r.Context(), m.ID); err == nil {
			v.Workflow = &templates.Link{Label: workflowLabel(wf), URL: workflowURL(wf)}
		}
	}
	v.Page = c.page(w, r, m.Title, "memos")
	c.render(w, r, http.StatusOK, templates.MemoPage(v))
}
