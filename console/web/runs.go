package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

// textCountCap bounds the runs a text filter's per-status counts visit: a
// phrase of common trigrams is checked run by run, so counting every match
// of a broad filter would cost more than the page.
const textCountCap = 500

var runStatuses = []string{store.RunRunning, store.RunSuspended, store.RunSucceeded, store.RunFailed, store.RunCancelled, store.RunRecoveryExhausted}

func (c *Console) runRoutes(r chi.Router) {
	r.Get("/runs", c.runList)
	r.Get("/runs/{id}", c.runShow)
	// No role check: the engine refuses non-stewards (and says why).
	r.Post("/runs/{id}/rerun", c.runRerun)
	r.Post("/runs/{id}/cancel", c.runCancel)
}

func (c *Console) runRow(run *store.Run) templates.RunRow {
	row := templates.RunRow{ID: run.ID, URL: runURL(run.ID), Title: engine.RunTitle(run), Command: run.Command, Status: run.Status,
		ErrorKind: run.ErrorKind, Started: c.ago(run.CreatedAt)}
	if run.FinishedAt != nil {
		if row.Duration = durationText(run.FinishedAt.Sub(run.CreatedAt).Milliseconds()); row.Duration == "" {
			row.Duration = "< 1 ms"
		}
	}
	if row.ErrorKind == row.Status {
		row.ErrorKind = "" // "cancelled" twice says nothing
	}
	if run.SessionID != "" {
		row.Session = &templates.Link{Label: run.SessionID, URL: sessionURL(run.SessionID)}
	}
	return row
}

// runsQuery renders a runs listing's filters as a query (status left to the
// caller, so each status link can set its own).
func runsQuery(p *store.RunListParams, status string) url.Values {
	q := url.Values{}
	if p.Command != "" {
		q.Set("workflow", strings.TrimPrefix(p.Command, "/"))
	}
	if p.SessionID != "" {
		q.Set("sessionId", p.SessionID)
	}
	if p.Query != "" {
		q.Set("q", p.Query)
	}
	if status != "" {
		q.Set("status", status)
	}
	return q
}

func runsURL(q url.Values) string {
	if len(q) == 0 {
		return "/runs"
	}
	return "/runs?" + q.Encode()
}

// runsView builds the listing; separate from the handler so the benchmark
// times exactly what a request does.
func (c *Console) runsView(ctx context.Context, q url.Values) (templates.RunsView, error) {
	var v templates.RunsView
	p, err := paging.RunFilter(q)
	if err != nil {
		return v, err
	}
	// The page pages like GET /api/runs (same cursor and page size).
	limit, after, err := paging.Params(q)
	if err != nil {
		return v, err
	}
	p.After, p.Limit = after, limit+1
	runs, err := c.Store.RunList(ctx, p)
	if err != nil {
		return v, err
	}
	base := runsQuery(p, p.Status)
	if q.Get("limit") != "" {
		base.Set("limit", q.Get("limit"))
	}
	if len(runs) > limit {
		runs = runs[:limit]
		next := runsQuery(p, p.Status)
		for k, vs := range base {
			next[k] = vs
		}
		next.Set("cursor", paging.EncodeCursor(runs[limit-1].CreatedAt, runs[limit-1].ID))
		v.NextURL = templSafe(runsURL(next))
	}
	if after != nil {
		v.FirstURL = templSafe(runsURL(base))
	}
	counts, err := c.Store.RunCountsByStatus(ctx, &store.RunCountParams{Command: p.Command, SessionID: p.SessionID, Query: p.Query,
		Cap: textCountCap})
	if err != nil {
		return v, err
	}
	var all int64
	for _, st := range runStatuses {
		all += counts.ByStatus[st]
	}
	v.Statuses = append(v.Statuses, templates.StatusCount{Label: "all", N: all, On: p.Status == "", URL: templSafe(runsURL(runsQuery(p, "")))})
	for _, st := range runStatuses {
		v.Statuses = append(v.Statuses, templates.StatusCount{Status: st, Label: statusLabel(st), N: counts.ByStatus[st], On: p.Status == st,
			URL: templSafe(runsURL(runsQuery(p, st)))})
	}
	if counts.Capped {
		v.CountNote = fmt.Sprintf("More than %d runs match the text; the counts are of the newest %d.", textCountCap, textCountCap)
	}
	wfs, err := c.Store.WorkflowList(ctx)
	if err != nil {
		return v, err
	}
	for _, wf := range wfs {
		if wf.Command != "" {
			v.Workflows = append(v.Workflows, templates.Option{Value: strings.TrimPrefix(wf.Command, "/"), Label: wf.Command,
				Selected: wf.Command == p.Command})
		}
	}
	v.Status, v.Query, v.SessionID = p.Status, p.Query, p.SessionID
	if p.SessionID != "" {
		label := p.SessionID
		if s, err := c.Store.SessionGetByID(ctx, p.SessionID); err == nil {
			label = sessionTitle(s)
		}
		v.Session = &templates.Link{Label: label, URL: sessionURL(p.SessionID)}
	}
	v.Filtered = p.Command != "" || p.SessionID != "" || p.Query != "" || p.Status != ""
	v.ClearURL = "/runs"
	for _, run := range runs {
		v.Rows = append(v.Rows, c.runRow(run))
	}
	return v, nil
}

func (c *Console) runList(w http.ResponseWriter, r *http.Request) {
	v, err := c.runsView(r.Context(), r.URL.Query())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, "Runs", "runs")
	c.render(w, r, http.StatusOK, templates.RunsPage(v))
}

func (c *Console) runShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	run, err := c.Store.RunGetByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// A re-run (or any item) not claimed yet has no run: its page says
		// it is queued and refreshes until the run exists. An item no
		// longer pending was claimed between the two reads (the claim
		// writes the item and its run together): the run exists now.
		if it, ierr := c.Store.QueueItemGetByID(ctx, store.ItemIDForRun(id)); ierr == nil {
			if it.Status == store.ItemPending {
				c.renderQueued(w, r, id, it)
				return
			}
			run, err = c.Store.RunGetByID(ctx, id)
		}
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v, err := c.runView(ctx, run, identity(r).Caller())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, v.Title, "runs")
	c.render(w, r, http.StatusOK, templates.RunPage(v))
}

func (c *Console) renderQueued(w http.ResponseWriter, r *http.Request, runID string, it *store.QueueItem) {
	run := &store.Run{ID: runID, ItemID: it.ID, Command: it.Command, SessionID: it.SessionID, Payload: it.Payload}
	v := templates.RunView{ID: runID, Title: engine.RunTitle(run), Command: it.Command, Status: store.ItemPending, Item: it.ID,
		Started: c.ago(it.CreatedAt), Queued: true, PollURL: "/runs/" + runID, Lead: "Queued: a runner will pick it up in a moment."}
	if it.SessionID != "" {
		v.Session = &templates.Link{Label: it.SessionID, URL: sessionURL(it.SessionID)}
	}
	v.Page = c.page(w, r, v.Title, "runs")
	c.render(w, r, http.StatusOK, templates.RunPage(v))
}

// runView builds one run's page for the viewer d.
func (c *Console) runView(ctx context.Context, run *store.Run, d engine.Decider) (templates.RunView, error) {
	now := c.Now()
	names := c.userNames(ctx)
	v := templates.RunView{ID: run.ID, Title: engine.RunTitle(run), Command: run.Command, Status: run.Status, Terminal: run.Settled(),
		ErrorKind: run.ErrorKind, Error: peopleIn(run.Error, names), Item: run.ItemID, Started: c.ago(run.CreatedAt), RecoveryAttempts: run.RecoveryAttempts,
		Runner: run.RunnerID, Heartbeat: c.ago(run.HeartbeatAt), RerunURL: "/runs/" + run.ID + "/rerun", CancelURL: "/runs/" + run.ID + "/cancel",
		Usage: usagePhrase(store.Usage{Runs: 1, TokensIn: run.TokensIn, TokensOut: run.TokensOut}, run.Model)}
	if run.Command != "" {
		v.WorkflowURL = templSafe("/workflows/" + strings.TrimPrefix(run.Command, "/"))
	}
	if run.FinishedAt != nil {
		v.Finished = c.ago(*run.FinishedAt)
		v.Duration = durationText(run.FinishedAt.Sub(run.CreatedAt).Milliseconds())
	}
	if run.SessionID != "" {
		label := run.SessionID
		if s, err := c.Store.SessionGetByID(ctx, run.SessionID); err == nil {
			label = sessionTitle(s)
		}
		v.Session = &templates.Link{Label: label, URL: sessionURL(run.SessionID)}
	}
	var m workflow.Manifest
	if len(run.Manifest) > 0 && json.Unmarshal(run.Manifest, &m) == nil {
		b, _ := json.MarshalIndent(m, "", "  ")
		v.Manifest = string(b)
	}
	var guards []workflow.GuardOutcome
	if len(run.Guards) > 0 && json.Unmarshal(run.Guards, &guards) == nil {
		for _, g := range guards {
			v.Guards = append(v.Guards, templates.GuardView{Check: g.Check, Passed: g.Passed, Detail: g.Detail})
		}
	}
	// A run may be held more than once (its Token budget, then its output
	// review); the lead speaks of the latest, the page shows them all.
	holds, err := c.Store.HoldListByRun(ctx, run.ID)
	if err != nil {
		return v, err
	}
	var hold *store.Hold
	for _, h := range holds {
		if h.ID == run.HoldID {
			hold = h
		}
	}
	rights, err := c.rightsOf(ctx, d)
	if err != nil {
		return v, err
	}
	for _, h := range holds {
		ds, err := c.Store.HoldDecisionList(ctx, h.ID)
		if err != nil {
			return v, err
		}
		v.Holds = append(v.Holds, templates.RunHold{Row: c.holdRow(h, run.Payload, rights, names), Audit: c.auditRows(ds, names)})
	}
	v.Waterfall, v.Total = waterfall(run, m, holds, now, names)
	if run.DispatchMemoID != "" {
		label := "Memo " + run.DispatchMemoID
		if memo, err := c.Store.MemoGetByID(ctx, run.DispatchMemoID); err == nil {
			label = memo.Title
		}
		v.Dispatch = append(v.Dispatch, templates.Link{Label: label, URL: memoURL(run.DispatchMemoID)})
	}
	if run.Status == store.RunSucceeded && m.Replies() && run.SessionID != "" {
		v.Dispatch = append(v.Dispatch, templates.Link{Label: "A reply in the session's thread", URL: sessionURL(run.SessionID)})
	}
	v.Lead, v.LeadBad = runLead(run, hold, v.Dispatch, now, names)
	if rights != nil && rights.Steward() {
		v.CanRerun = run.Settled()
		v.CanCancel = run.Status == store.RunRunning || run.Status == store.RunSuspended
		v.CancelNote = "Cancel this run? Its model call is stopped and it ends cancelled."
		if run.Status == store.RunSuspended {
			v.CancelNote = "Cancel this run? Its hold is rejected in your name, as a decision."
		}
	}
	// A moving run refreshes itself; a settled one, or one waiting on an
	// open hold (whose form a steward may be typing into), does not.
	if !run.Settled() && (hold == nil || hold.Status != store.HoldOpen) {
		v.PollURL = "/runs/" + run.ID
	}
	return v, nil
}

// approvers names who approved a hold: each steward whose approval
// counted, else its decider (a hold decided before approvals were kept).
func approvers(h *store.Hold, people map[string]string) string {
	if len(h.Approvals) == 0 {
		return requester(h.DecidedBy, people)
	}
	names := make([]string, len(h.Approvals))
	for i, a := range h.Approvals {
		names[i] = requester(a.By, people)
	}
	return engine.Names(names)
}

// editor names who edited the hold's output when several stewards
// approved it (one approver is the decider, named already), else "".
func editor(h *store.Hold, names map[string]string) string {
	if by := engine.HoldEditor(h.Approvals); by != "" && h.EditedOutput != nil && len(h.Approvals) > 1 {
		return requester(by, names)
	}
	return ""
}

// runLead says, in one sentence, what happened to the run: a terminal state
// names who ended it and why ("Rejected by ada: off topic").
func runLead(run *store.Run, hold *store.Hold, dispatch []templates.Link, now time.Time, names map[string]string) (string, bool) {
	switch run.Status {
	case store.RunSucceeded:
		s := "Succeeded"
		if run.FinishedAt != nil {
			s += " in " + durationText(max(run.FinishedAt.Sub(run.CreatedAt).Milliseconds(), 1))
		}
		if len(dispatch) > 0 {
			s += "; published “" + dispatch[0].Label + "”"
		}
		if hold != nil && hold.DecidedBy != "" {
			s += ", approved by " + approvers(hold, names)
			if hold.EditedOutput != nil {
				s += " with edits"
				if by := editor(hold, names); by != "" {
					s += " by " + by
				}
			}
		}
		return s + ".", false
	case store.RunCancelled:
		if hold != nil && hold.Status == store.HoldRejected {
			s := "Rejected by " + requester(hold.DecidedBy, names)
			if hold.Comment != "" {
				s += ": " + hold.Comment
			}
			if hold.DecidedVia == "timeout" {
				s = "Rejected when its hold timed out"
			}
			return s + ". Nothing was published.", true
		}
		msg := strings.TrimSpace(peopleIn(run.Error, names))
		if msg == "" {
			msg = "cancelled"
		}
		return capitalize(msg) + ". Nothing was published.", true
	case store.RunFailed, store.RunRecoveryExhausted:
		s := "Failed"
		started := false
		for i, st := range run.Steps {
			started = started || st.StartedAt != nil
			if st.Status == engine.StepFailed {
				s += fmt.Sprintf(" at step %d (%s)", i+1, st.Kind)
				break
			}
		}
		if !started {
			s += " before its first step" // a reply with nowhere to land, say: known at once
		}
		if run.ErrorKind != "" {
			s += " — " + run.ErrorKind
		}
		if run.Error != "" {
			s += ": " + firstSentence(peopleIn(run.Error, names), 300)
		}
		return s, true
	case store.RunSuspended:
		if hold != nil && hold.Status == store.HoldOpen {
			s := "Waiting for a steward's approval for " + waitText(now.Sub(hold.CreatedAt))
			if hold.RequiredApprovals > 1 {
				s += fmt.Sprintf(" (%d of %d approvals)", len(hold.Approvals), hold.RequiredApprovals)
			}
			return s + ".", false
		}
		if hold != nil && hold.Status == store.HoldApproved {
			return "Approved by " + approvers(hold, names) + "; resuming.", false
		}
		return "Suspended.", false
	case store.RunRunning:
		for i, st := range run.Steps {
			if st.Status == engine.StepRunning || st.Status == engine.StepPending {
				return fmt.Sprintf("Running: step %d of %d (%s).", i+1, len(run.Steps), st.Kind), false
			}
		}
		return "Running.", false
	}
	return "", false
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// waterfall places each step, and the time the run waited for approval, on
// the run's time axis (0..1000 from the run's start to its end, or now).
func waterfall(run *store.Run, m workflow.Manifest, holds []*store.Hold, now time.Time, names map[string]string) ([]templates.WaterfallRow, string) {
	start := run.CreatedAt
	end := now
	if run.FinishedAt != nil {
		end = *run.FinishedAt
	}
	type seg struct {
		row      templates.WaterfallRow
		from, to time.Time
		ok       bool
	}
	var segs []seg
	// Each wait sits before the step it held: the output review's before
	// the Output step (which opened it), any other (a Token budget) before
	// the first step that started after it opened.
	var waits []seg
	review := -1
	for _, hold := range holds {
		to := now
		if hold.DecidedAt != nil {
			to = *hold.DecidedAt
		}
		note := "open"
		if hold.Status != store.HoldOpen {
			note = hold.Status + " by " + requester(hold.DecidedBy, names) + " via " + hold.DecidedVia
		}
		if hold.ID == store.HoldIDForRun(run.ID) {
			review = len(waits)
		}
		waits = append(waits, seg{row: templates.WaterfallRow{Label: "Waiting for approval: " + hold.GateLabel, Kind: "wait", Status: hold.Status,
			Duration: durationText(max(to.Sub(hold.CreatedAt).Milliseconds(), 1)), Note: note}, from: hold.CreatedAt, to: to, ok: true})
	}
	placed := make([]bool, len(waits))
	place := func(i int) {
		if !placed[i] {
			placed[i] = true
			segs = append(segs, waits[i])
		}
	}
	for i, s := range run.Steps {
		if run.Settled() && (s.Status == engine.StepHeld || s.Status == engine.StepRunning) {
			// The run ended while this step waited (a rejection, a
			// terminate): it ended with the run, it is not waiting still.
			s.Status = run.Status
		}
		sv := &templates.StepView{N: i + 1, Kind: s.Kind, Status: s.Status, ErrorKind: s.ErrorKind, Error: s.Error}
		if i < len(m.Steps) {
			sv.Text = m.Steps[i].Text
		}
		var meta []string
		if s.StartedAt != nil {
			meta = append(meta, "started "+s.StartedAt.UTC().Format("15:04:05.000"))
		}
		if s.TokensIn+s.TokensOut > 0 {
			meta = append(meta, fmt.Sprintf("%d in / %d out tokens", s.TokensIn, s.TokensOut))
		}
		if s.Attempts > 1 {
			meta = append(meta, fmt.Sprintf("%d attempts", s.Attempts))
		}
		sv.Meta = strings.Join(meta, " · ")
		row := templates.WaterfallRow{Label: fmt.Sprintf("%d. %s", i+1, s.Kind), Kind: s.Kind, Status: s.Status, Step: sv}
		sg := seg{row: row}
		if s.StartedAt != nil {
			sg.from, sg.ok = *s.StartedAt, true
			d := time.Duration(s.DurationMs) * time.Millisecond
			if s.Status == engine.StepRunning {
				d = now.Sub(*s.StartedAt)
			}
			sg.to = s.StartedAt.Add(d)
			sg.row.Duration = durationText(max(d.Milliseconds(), 0))
			if sg.row.Duration == "" {
				sg.row.Duration = "< 1 ms"
			}
		}
		for w := range waits {
			if w == review && s.Kind == workflow.KindOutput || w != review && s.StartedAt != nil && !s.StartedAt.Before(waits[w].from) {
				place(w)
			}
		}
		segs = append(segs, sg)
	}
	for w := range waits {
		place(w)
	}
	for _, s := range segs {
		if s.ok && s.to.After(end) {
			end = s.to
		}
	}
	span := end.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	scale := func(t time.Time) int {
		x := int(int64(t.Sub(start)) * 1000 / int64(span))
		return min(max(x, 0), 1000)
	}
	out := make([]templates.WaterfallRow, 0, len(segs))
	for _, s := range segs {
		if s.ok {
			s.row.Start = scale(s.from)
			s.row.Width = max(scale(s.to)-s.row.Start, 0)
			if s.row.Start+s.row.Width > 1000 {
				s.row.Width = 1000 - s.row.Start
			}
		} else {
			s.row.Duration = "—"
		}
		out = append(out, s.row)
	}
	return out, "total " + durationText(max(end.Sub(start).Milliseconds(), 1))
}

// runRerun re-runs a run through engine.Rerun and shows the new run.
func (c *Console) runRerun(w http.ResponseWriter, r *http.Request) {
	c.runAction(w, r, func(id string) (string, string, error) {
		it, err := c.Engine.Rerun(r.Context(), id, identity(r).Caller())
		if err != nil {
			return "", "", err
		}
		return string(runURL(store.RunIDForItem(it.ID))), "Re-run of " + id + " queued (" + it.DedupeKey + ").", nil
	})
}

// runCancel cancels a run through engine.CancelRun.
func (c *Console) runCancel(w http.ResponseWriter, r *http.Request) {
	c.runAction(w, r, func(id string) (string, string, error) {
		run, err := c.Engine.CancelRun(r.Context(), id, identity(r).Caller())
		if err != nil {
			return "", "", err
		}
		if !run.Settled() {
			return "/runs/" + id, "Cancel requested: the run stops at its next step.", nil
		}
		return "/runs/" + id, "Cancelled.", nil
	})
}

// runAction runs act on the run the URL names and lands where it says; a
// refusal lands back on the run with its reason.
func (c *Console) runAction(w http.ResponseWriter, r *http.Request, act func(id string) (to, msg string, err error)) {
	id := chi.URLParam(r, "id")
	back := "/runs/" + id
	if c.Engine == nil {
		c.redirect(w, r, back, "The workflow engine is not running.", true)
		return
	}
	to, msg, err := act(id)
	if _, ok := refusalStatus(err); ok {
		c.redirect(w, r, back, store.ReasonOf(err), true)
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, to, msg, false)
}

// usagePhrase says what tokens runs used (SPEC §10), with the model when
// one is named.
func usagePhrase(u store.Usage, model string) string {
	if u.TokensIn+u.TokensOut == 0 {
		return "none recorded"
	}
	out := fmt.Sprintf("%s in / %s out", thousands(u.TokensIn), thousands(u.TokensOut))
	if u.Runs > 1 {
		out += fmt.Sprintf(" over %d runs", u.Runs)
	}
	if model != "" {
		out += " · " + model
	}
	return out
}

// thousands writes n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sumUsage adds usage rows into one.
func sumUsage(rows []*store.Usage, keep func(*store.Usage) bool) store.Usage {
	var u store.Usage
	for _, r := range rows {
		if keep == nil || keep(r) {
			u.Runs, u.TokensIn, u.TokensOut = u.Runs+r.Runs, u.TokensIn+r.TokensIn, u.TokensOut+r.TokensOut
		}
	}
	return u
}
