package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// engineRoutes mounts the queue, runs, holds and internal cron routes.
func (a *API) engineRoutes(r chi.Router) {
	r.With(a.require(store.RoleSteward)).Post("/workflows/{command}/enqueue", a.enqueue)
	r.Get("/queue/{itemId}", a.queueItemGet)
	r.Get("/runs", a.runList)
	r.Get("/runs/{id}", a.runGet)
	// No role check here: the engine refuses non-stewards itself (403).
	r.Post("/runs/{id}/rerun", a.runRerun)
	r.Post("/runs/{id}/cancel", a.runCancel)
	r.Get("/holds", a.holdList)
	r.Get("/holds/{id}", a.holdGet)
	r.Post("/holds/{id}/decision", a.holdDecide)
}

// engineInternalRoutes are mounted under /internal, behind x-internal-key.
func (a *API) engineInternalRoutes(r chi.Router) {
	r.Get("/cron/run-workflows", a.cronRunWorkflows)
}

func (a *API) engineOr503(w http.ResponseWriter) bool {
	if a.Engine == nil {
		WriteError(w, http.StatusServiceUnavailable, "the workflow engine is not running")
		return false
	}
	return true
}

type enqueueRequest struct {
	DedupeKey string         `json:"dedupeKey"`
	Payload   map[string]any `json:"payload"`
	SessionID string         `json:"sessionId"`
}

type enqueueResponse struct {
	Enqueued bool             `json:"enqueued"`
	Item     *store.QueueItem `json:"item"`
}

func (a *API) enqueue(w http.ResponseWriter, r *http.Request) {
	if !a.engineOr503(w) {
		return
	}
	if strings.TrimSpace(chi.URLParam(r, "command")) == "" {
		WriteError(w, http.StatusNotFound, "no workflow is named: POST /api/workflows/<command>/enqueue")
		return
	}
	var req enqueueRequest
	if !Decode(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.DedupeKey) == "" {
		WriteError(w, http.StatusBadRequest, "dedupeKey is required: it makes the enqueue idempotent")
		return
	}
	if req.Payload == nil {
		req.Payload = map[string]any{}
	}
	if req.SessionID == "" {
		// An enqueue made under X-Holdfast-Session joins that session.
		req.SessionID = trackedSession(r.Context())
	}
	it, created, err := a.Engine.Enqueue(r.Context(), engine.EnqueueParams{Command: "/" + chi.URLParam(r, "command"),
		DedupeKey: req.DedupeKey, Payload: req.Payload, SessionID: req.SessionID, OwnerUID: auth.From(r.Context()).UID()})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	WriteJSON(w, status, enqueueResponse{Enqueued: created, Item: it})
}

func (a *API) queueItemGet(w http.ResponseWriter, r *http.Request) {
	it, err := a.Store.QueueItemGetByID(r.Context(), chi.URLParam(r, "itemId"))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, it)
}

// RunView is a run as the API shows it (SPEC §7).
type RunView struct {
	*store.Run
	// Title is what the run is about (engine.RunTitle).
	Title     string                `json:"title"`
	Hold      *HoldView             `json:"hold"`
	Dispatch  *DispatchView         `json:"dispatch"`
	Decisions []*store.HoldDecision `json:"decisions,omitempty"`
}

// DispatchView links a run to what it dispatched.
type DispatchView struct {
	MemoID string `json:"memoId"`
}

// HoldView is a hold as the API shows it.
type HoldView struct {
	*store.Hold
}

func runView(run *store.Run) *RunView {
	run.Manifest = normalizeManifest(run.Manifest)
	v := &RunView{Run: run, Title: engine.RunTitle(run)}
	if run.DispatchMemoID != "" {
		v.Dispatch = &DispatchView{MemoID: run.DispatchMemoID}
	}
	return v
}

// normalizeManifest re-encodes a stored manifest through its type, so runs
// stored before policy durations were written as strings ("2m0s") show them
// the same way as new ones; anything undecodable is shown as stored.
func normalizeManifest(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return raw
	}
	var m workflow.Manifest
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

func (a *API) runList(w http.ResponseWriter, r *http.Request) {
	p, err := paging.RunFilter(r.URL.Query())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	limit, after, err := paging.Params(r.URL.Query())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	// One row past the page tells whether there is a next one.
	p.After, p.Limit = after, limit+1
	runs, err := a.Store.RunList(r.Context(), p)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	next := ""
	if len(runs) > limit {
		runs = runs[:limit]
		next = paging.EncodeCursor(runs[limit-1].CreatedAt, runs[limit-1].ID)
	}
	out := make([]*RunView, len(runs))
	for i, run := range runs {
		out[i] = runView(run)
		// A listed run has the same shape as GET /api/runs/{id}: its hold
		// is shown, not null beside a holdId. One lookup by primary key
		// per held run; a page is at most paging.MaxSize runs.
		if run.HoldID != "" {
			h, err := a.Store.HoldGetByID(r.Context(), run.HoldID)
			if err != nil {
				Fail(w, r, a.Log, err)
				return
			}
			out[i].Hold = &HoldView{Hold: h}
		}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"runs": out, "next": next})
}

type rerunResponse struct {
	Item *store.QueueItem `json:"item"`
}

// runRerun enqueues the run's payload again (engine.Rerun): 201 {item}.
func (a *API) runRerun(w http.ResponseWriter, r *http.Request) {
	if !a.engineOr503(w) {
		return
	}
	it, err := a.Engine.Rerun(r.Context(), chi.URLParam(r, "id"), auth.From(r.Context()).Caller())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusCreated, rerunResponse{Item: it})
}

// runCancel stops the run (engine.CancelRun): 200 with the run.
func (a *API) runCancel(w http.ResponseWriter, r *http.Request) {
	if !a.engineOr503(w) {
		return
	}
	run, err := a.Engine.CancelRun(r.Context(), chi.URLParam(r, "id"), auth.From(r.Context()).Caller())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	v := runView(run)
	if run.HoldID != "" {
		h, err := a.Store.HoldGetByID(r.Context(), run.HoldID)
		if err != nil {
			Fail(w, r, a.Log, err)
			return
		}
		v.Hold = &HoldView{Hold: h}
	}
	WriteJSON(w, http.StatusOK, v)
}

func (a *API) runGet(w http.ResponseWriter, r *http.Request) {
	run, err := a.Store.RunGetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	v := runView(run)
	if run.HoldID != "" {
		h, err := a.Store.HoldGetByID(r.Context(), run.HoldID)
		if err != nil {
			Fail(w, r, a.Log, err)
			return
		}
		v.Hold = &HoldView{Hold: h}
		if v.Decisions, err = a.Store.HoldDecisionList(r.Context(), run.HoldID); err != nil {
			Fail(w, r, a.Log, err)
			return
		}
	}
	WriteJSON(w, http.StatusOK, v)
}

func (a *API) holdList(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	switch status {
	case "", store.HoldOpen, store.HoldApproved, store.HoldRejected:
	default:
		WriteError(w, http.StatusBadRequest, "status must be open, approved or rejected")
		return
	}
	limit, after, err := paging.Params(r.URL.Query())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	hs, err := a.Store.HoldList(r.Context(), &store.HoldListParams{Status: status, SessionID: r.URL.Query().Get("sessionId"),
		After: after, Limit: limit + 1})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	next := ""
	if len(hs) > limit {
		hs = hs[:limit]
		next = paging.EncodeCursor(hs[limit-1].CreatedAt, hs[limit-1].ID)
	}
	WriteJSON(w, http.StatusOK, map[string]any{"holds": hs, "next": next})
}

// HoldDetail is one hold with its audit log.
type HoldDetail struct {
	*store.Hold
	Decisions []*store.HoldDecision `json:"decisions"`
}

func (a *API) holdGet(w http.ResponseWriter, r *http.Request) {
	h, err := a.Store.HoldGetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	ds, err := a.Store.HoldDecisionList(r.Context(), h.ID)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, HoldDetail{Hold: h, Decisions: ds})
}

type decisionRequest struct {
	Decision string `json:"decision"`
	Comment  string `json:"comment"`
	Output   string `json:"output"`
}

func (a *API) holdDecide(w http.ResponseWriter, r *http.Request) {
	if !a.engineOr503(w) {
		return
	}
	var req decisionRequest
	if !Decode(w, r, &req) {
		return
	}
	h, err := a.Engine.Decide(r.Context(), engine.DecideParams{HoldID: chi.URLParam(r, "id"), Decision: req.Decision,
		Comment: req.Comment, Output: req.Output, Decider: auth.From(r.Context()).Caller()})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, h)
}

func (a *API) cronRunWorkflows(w http.ResponseWriter, r *http.Request) {
	if !a.engineOr503(w) {
		return
	}
	res, err := a.Engine.RunPass(r.Context())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, res)
}
