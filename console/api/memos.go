package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/search"
	"github.com/holdfast-bot/holdfast/store"
)

type memoCreateRequest struct {
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	MemoType string   `json:"memoType"`
	Tags     []string `json:"tags"`
	Notes    string   `json:"notes"`
	Unlisted bool     `json:"unlisted"`
}

func (a *API) memoCreate(w http.ResponseWriter, r *http.Request) {
	var req memoCreateRequest
	if !Decode(w, r, &req) {
		return
	}
	if req.MemoType == store.MemoTypeWorkflow && !auth.From(r.Context()).AtLeast(store.RoleAdmin) {
		WriteError(w, http.StatusForbidden, "workflow memos are managed by admins")
		return
	}
	m, err := a.Library.Create(r.Context(), library.CreateParams{Title: req.Title, Body: req.Body, MemoType: req.MemoType,
		Tags: req.Tags, Notes: req.Notes, Unlisted: req.Unlisted})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusCreated, m)
}

// memoListSize is how many memos the listing (no q) answers, newest
// first; a search takes the grammar's default (search.DefaultLimit, SPEC
// §4.1) unless its query gives limit:<n>.
const memoListSize = 50

// memoList searches the library with the query grammar of SPEC §4.1
// (engine/search): a filter with a bad value is 400 naming it, any other
// text is valid (the store makes it safe and bounds its cost); memoType,
// when given, is the query's type: (note, workflow or any); unlisted memos
// are listed for stewards and admins only (SPEC §7), as in the console,
// unless they ask not to (includeUnlisted=false).
func (a *API) memoList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sq, err := search.Parse(q.Get("q"))
	if err == nil {
		err = sq.SetType(q.Get("memoType"))
	}
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	mayList := auth.From(r.Context()).ListsUnlisted()
	unlisted := mayList
	if v := q.Get("includeUnlisted"); v != "" {
		if unlisted, err = boolParam(v); err != nil {
			WriteError(w, http.StatusBadRequest, "includeUnlisted must be true or false")
			return
		}
	}
	if unlisted && !mayList {
		WriteError(w, http.StatusForbidden, "unlisted memos are listed for stewards and admins only")
		return
	}
	p := sq.ListParams(time.Now(), memoListSize)
	p.IncludeUnlisted = unlisted
	memos, err := a.Store.MemoSearch(r.Context(), p)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"memos": memos})
}

func (a *API) memoGet(w http.ResponseWriter, r *http.Request) {
	m, err := a.Store.MemoGetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, m)
}

type memoUpdateRequest struct {
	Title           *string   `json:"title"`
	Body            *string   `json:"body"`
	Notes           *string   `json:"notes"`
	Tags            *[]string `json:"tags"`
	Unlisted        *bool     `json:"unlisted"`
	ExpectedVersion *int64    `json:"expectedVersion"`
}

func (a *API) memoUpdate(w http.ResponseWriter, r *http.Request) {
	var req memoUpdateRequest
	if !Decode(w, r, &req) {
		return
	}
	if req.Body == nil || req.ExpectedVersion == nil {
		WriteError(w, http.StatusBadRequest, "body and expectedVersion are required")
		return
	}
	id := chi.URLParam(r, "id")
	cur, err := a.Store.MemoGetByID(r.Context(), id)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	if cur.MemoType == store.MemoTypeWorkflow && !auth.From(r.Context()).AtLeast(store.RoleAdmin) {
		WriteError(w, http.StatusForbidden, "workflow memos are managed by admins")
		return
	}
	m, err := a.Library.Update(r.Context(), library.UpdateParams{ID: id, ExpectedVersion: *req.ExpectedVersion,
		Title: req.Title, Body: *req.Body, Notes: req.Notes, Tags: req.Tags, Unlisted: req.Unlisted})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, m)
}

func (a *API) workflowList(w http.ResponseWriter, r *http.Request) {
	wfs, err := a.Store.WorkflowList(r.Context())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"workflows": wfs})
}
