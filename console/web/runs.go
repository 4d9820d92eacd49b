package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

var runStatuses = []string{store.RunRunning, store.RunSuspended, store.RunSucceeded, store.RunFailed, store.RunCancelled, store.RunRecoveryExhausted}

func (c *Console) runRoutes(r chi.Router) {
	r.Get("/runs", c.runList)
	r.Get("/runs/{id}", c.runShow)
}

func (c *Console) runRow(run *store.Run) templates.RunRow {
	row := templates.RunRow{ID: run.ID, URL: runURL(run.ID), Command: run.Command, Status: run.Status, ErrorKind: run.ErrorKind,
		Started: c.ago(run.CreatedAt)}
	if run.FinishedAt != nil {
		row.Duration = durationText(run.FinishedAt.Sub(run.CreatedAt).Milliseconds())
	}
	if run.SessionID != "" {
		row.Session = &templates.Link{Label: run.SessionID, URL: sessionURL(run.SessionID)}
	}
	return row
}

func (c *Console) runList(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	valid := status == ""
	for _, s := range runStatuses {
		valid = valid || s == status
	}
	if !valid {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "status must be one of "+strings.Join(runStatuses, ", "))
		return
	}
	// The page pages like GET /api/runs (same cursor), a full page of
	// paging.MaxSize runs unless the URL asks for fewer.
	q := r.URL.Query()
	limit, after, err := paging.Params(q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if q.Get("limit") == "" {
		limit = paging.MaxSize
	}
	runs, err := c.Store.RunList(r.Context(), &store.RunListParams{Status: status, After: after, Limit: limit + 1})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var v templates.RunsView
	if len(runs) > limit {
		runs = runs[:limit]
		next := url.Values{"cursor": {paging.EncodeCursor(runs[limit-1].CreatedAt, runs[limit-1].ID)}}
		if status != "" {
			next.Set("status", status)
		}
		if q.Get("limit") != "" {
			next.Set("limit", q.Get("limit"))
		}
		v.NextURL = templSafe("/runs?" + next.Encode())
	}
	v.Statuses = append(v.Statuses, templates.OriginToggle{Label: "all", On: status == "", URL: "/runs"})
	for _, s := range runStatuses {
		v.Statuses = append(v.Statuses, templates.OriginToggle{Origin: s, Label: strings.ReplaceAll(s, "_", " "), On: status == s,
			URL: templSafe("/runs?status=" + url.QueryEscape(s))})
	}
	for _, run := range runs {
		v.Rows = append(v.Rows, c.runRow(run))
	}
	v.Page = c.page(w, r, "Runs", "runs")
	c.render(w, r, http.StatusOK, templates.RunsPage(v))
}

func (c *Console) runShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	run, err := c.Store.RunGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := templates.RunView{ID: run.ID, Command: run.Command, Status: run.Status, Terminal: run.Settled(), ErrorKind: run.ErrorKind,
		Error: run.Error, Item: run.ItemID, Started: c.ago(run.CreatedAt), RecoveryAttempts: run.RecoveryAttempts,
		Runner: run.RunnerID, Heartbeat: c.ago(run.HeartbeatAt)}
	if run.FinishedAt != nil {
		v.Finished = c.ago(*run.FinishedAt)
		v.Duration = durationText(run.FinishedAt.Sub(run.CreatedAt).Milliseconds())
	}
	if run.SessionID != "" {
		v.Session = &templates.Link{Label: run.SessionID, URL: sessionURL(run.SessionID)}
	}
	var m workflow.Manifest
	if len(run.Manifest) > 0 && json.Unmarshal(run.Manifest, &m) == nil {
		b, _ := json.MarshalIndent(m, "", "  ")
		v.Manifest = string(b)
	}
	for i, s := range run.Steps {
		sv := templates.StepView{N: i + 1, Kind: s.Kind, Status: s.Status, ErrorKind: s.ErrorKind, Error: s.Error}
		if i < len(m.Steps) {
			sv.Text = m.Steps[i].Text
		}
		var meta []string
		if s.StartedAt != nil {
			meta = append(meta, s.StartedAt.UTC().Format("15:04:05.000"))
		}
		if d := durationText(s.DurationMs); d != "" {
			meta = append(meta, d)
		}
		if s.TokensIn+s.TokensOut > 0 {
			meta = append(meta, fmt.Sprintf("%d in / %d out tokens", s.TokensIn, s.TokensOut))
		}
		if s.Attempts > 1 {
			meta = append(meta, fmt.Sprintf("%d attempts", s.Attempts))
		}
		sv.Meta = strings.Join(meta, " · ")
		v.Steps = append(v.Steps, sv)
	}
	var guards []workflow.GuardOutcome
	if len(run.Guards) > 0 && json.Unmarshal(run.Guards, &guards) == nil {
		for _, g := range guards {
			v.Guards = append(v.Guards, templates.GuardView{Check: g.Check, Passed: g.Passed, Detail: g.Detail})
		}
	}
	holdOpen := false
	if run.HoldID != "" {
		h, err := c.Store.HoldGetByID(ctx, run.HoldID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			c.fail(w, r, err)
			return
		}
		if h != nil {
			row := c.holdRow(h, identity(r), c.userNames(ctx))
			v.Hold = &row
			holdOpen = h.Status == store.HoldOpen
			ds, err := c.Store.HoldDecisionList(ctx, h.ID)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			v.Audit = c.auditRows(ds)
		}
	}
	if run.DispatchMemoID != "" {
		label := "Memo " + run.DispatchMemoID
		if memo, err := c.Store.MemoGetByID(ctx, run.DispatchMemoID); err == nil {
			label = memo.Title
		}
		v.Dispatch = append(v.Dispatch, templates.Link{Label: label, URL: memoURL(run.DispatchMemoID)})
	}
	if run.Status == store.RunSucceeded && m.Policy.Destination == workflow.DestinationReply && run.SessionID != "" {
		v.Dispatch = append(v.Dispatch, templates.Link{Label: "Reply in the session", URL: sessionURL(run.SessionID)})
	}
	// A moving run refreshes itself; a settled one, or one waiting on an
	// open hold (whose form a steward may be typing into), does not.
	if !run.Settled() && !holdOpen {
		v.PollURL = "/runs/" + run.ID
	}
	v.Page = c.page(w, r, "Run "+run.Command, "runs")
	c.render(w, r, http.StatusOK, templates.RunPage(v))
}
