package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/paging"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

const (
	// openHoldsShown is how many open holds the Holds page shows (oldest
	// first); the count says how many more wait behind them.
	openHoldsShown = 100
	// decidedPage is the decided history's page size.
	decidedPage = 20
)

func (c *Console) holdRoutes(r chi.Router) {
	r.Get("/holds", c.holdList)
	r.Get("/holds/live", c.holdLive)
	r.Get("/holds/{id}", c.holdShow)
	// No role check here on purpose: the engine refuses non-stewards itself
	// and audits the refused attempt, which a console-side 403 would not.
	r.Post("/holds/{id}/decision", c.holdDecide)
}

// openHoldCount feeds the nav badge: one indexed count.
func (c *Console) openHoldCount(ctx context.Context) int {
	n, err := c.Store.HoldCountOpen(ctx)
	if err != nil {
		return 0
	}
	return int(n)
}

func (c *Console) sessionOpenHolds(ctx context.Context, sessionID string) []templates.Link {
	hs, err := c.Store.HoldList(ctx, &store.HoldListParams{SessionID: sessionID, Status: store.HoldOpen})
	if err != nil {
		c.Log.WarnContext(ctx, "session open holds", slog.String("session_id", sessionID), slog.Any("error", err))
		return nil
	}
	payloads, _ := c.holdPayloads(ctx, hs)
	out := make([]templates.Link, 0, len(hs))
	for _, h := range hs {
		out = append(out, templates.Link{Label: engine.HoldTitle(h, payloads[h.ItemID]), URL: holdURL(h.ID)})
	}
	return out
}

// holdPayloads reads the payloads of the holds' items in one query, for
// their titles (engine.HoldTitle).
func (c *Console) holdPayloads(ctx context.Context, hs []*store.Hold) (map[string]map[string]any, error) {
	ids := make([]string, 0, len(hs))
	for _, h := range hs {
		if h.ItemID != "" {
			ids = append(ids, h.ItemID)
		}
	}
	items, err := c.Store.QueueItemListByIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]any, len(items))
	for _, it := range items {
		out[it.ID] = it.Payload
	}
	return out, nil
}

// holdCardStatus shows a transcript's hold card as the hold is now.
func (c *Console) holdCardStatus(ctx context.Context, card *templates.HoldCard, holdID string, names map[string]string) {
	if holdID == "" {
		return
	}
	if h, err := c.Store.HoldGetByID(ctx, holdID); err == nil {
		card.Status, card.Via, card.Comment = h.Status, h.DecidedVia, h.Comment
		if h.DecidedBy != "" { // an open hold is decided by nobody yet
			card.DecidedBy = requester(h.DecidedBy, names)
		}
		payloads, _ := c.holdPayloads(ctx, []*store.Hold{h})
		card.Title = engine.HoldTitle(h, payloads[h.ItemID])
	}
}

// requester names an item's owner or a decider for people: a console user
// by name, anyone else as the engine names them.
func requester(owner string, names map[string]string) string {
	if n := names[owner]; n != "" {
		return n
	}
	return engine.PersonName(owner)
}

// peopleIn names the people an engine text mentions for readers.
func peopleIn(text string, names map[string]string) string {
	return engine.PeopleIn(text, func(uid string) string { return requester(uid, names) })
}

// rightsOf resolves what the signed-in user may do with holds; nil when no
// engine runs (nothing can be decided).
func (c *Console) rightsOf(ctx context.Context, d engine.Decider) (*engine.Rights, error) {
	if c.Engine == nil {
		return nil, nil
	}
	return c.Engine.RightsOf(ctx, d)
}

// holdRow builds a hold's view. The decision controls follow the engine's
// rule for this viewer (rights, nil without an engine): what is enabled here
// is what Decide would accept.
func (c *Console) holdRow(h *store.Hold, payload map[string]any, rights *engine.Rights, names map[string]string) templates.HoldRow {
	row := templates.HoldRow{ID: h.ID, URL: holdURL(h.ID), RunURL: runURL(h.RunID), RunID: h.RunID, Title: engine.HoldTitle(h, payload),
		Command: h.Command, Workflow: h.WorkflowName, GateLabel: h.GateLabel, Requester: requester(h.OwnerUID, names), Status: h.Status,
		Age: c.ago(h.CreatedAt), PreviewHTML: renderMarkdown(h.Preview), PreviewText: h.Output, DecidedBy: requester(h.DecidedBy, names),
		DecidedVia: h.DecidedVia, Comment: h.Comment, DecideURL: "/holds/" + h.ID + "/decision",
		Edited: h.EditedOutput != nil && h.Status == store.HoldApproved, Sig: strconv.Itoa(len(h.Approvals))}
	if row.GateLabel == "" {
		row.GateLabel = "Review " + h.Command
	}
	if h.Status == store.HoldOpen {
		row.AgeText = "waiting " + waitText(c.Now().Sub(h.CreatedAt))
	}
	if h.EditedOutput != nil {
		row.PreviewHTML = renderMarkdown(*h.EditedOutput)
	}
	if h.DecidedAt != nil {
		row.DecidedAt = c.ago(*h.DecidedAt)
	}
	if h.SessionID != "" {
		row.SessionURL = sessionURL(h.SessionID)
	}
	if h.RequiredApprovals > 1 {
		row.Approvals = fmt.Sprintf("%d of %d", len(h.Approvals), h.RequiredApprovals)
	}
	switch {
	case h.Status != store.HoldOpen:
	case rights == nil:
		row.WhyNot = "The workflow engine is not running, so holds cannot be decided now."
	case !rights.Steward():
		_, row.WhyNot = rights.MayReject(h)
	default:
		row.CanDecide = true
		row.CanApprove, row.ApproveWhy = rights.MayApprove(h)
	}
	return row
}

// waitText is how long something has waited, coarsely: "under a minute", "12 min",
// "3 h 5 min", "2 days".
func waitText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 || h >= 10 {
			return strconv.Itoa(h) + " h"
		}
		return fmt.Sprintf("%d h %d min", h, m)
	default:
		return strconv.Itoa(int(d.Hours()/24)) + " days"
	}
}

// holdFilter is the Holds page's filters, all kept in the URL.
type holdFilter struct {
	workflow  string // a command with its slash
	requester string // an owner uid
	before    string // the decided history's cursor
}

func parseHoldFilter(q url.Values) holdFilter {
	f := holdFilter{requester: strings.TrimSpace(q.Get("requester")), before: q.Get("before")}
	if wf := strings.TrimSpace(q.Get("workflow")); wf != "" {
		f.workflow = "/" + strings.TrimPrefix(wf, "/")
	}
	return f
}

func (f holdFilter) query() url.Values {
	q := url.Values{}
	if f.workflow != "" {
		q.Set("workflow", f.workflow)
	}
	if f.requester != "" {
		q.Set("requester", f.requester)
	}
	return q
}

func (f holdFilter) params(p *store.HoldListParams) *store.HoldListParams {
	p.Command, p.OwnerUID = f.workflow, f.requester
	return p
}

// openHolds reads the open holds the page shows for f and their count.
func (c *Console) openHolds(ctx context.Context, f holdFilter) ([]*store.Hold, int, error) {
	open, err := c.Store.HoldList(ctx, f.params(&store.HoldListParams{Status: store.HoldOpen, Limit: openHoldsShown}))
	if err != nil {
		return nil, 0, err
	}
	n := len(open)
	if n == openHoldsShown || f.workflow != "" || f.requester != "" {
		count, err := c.Store.HoldCountOpenMatching(ctx, f.params(&store.HoldListParams{}))
		if err != nil {
			return nil, 0, err
		}
		n = int(count)
	}
	return open, n, nil
}

func (c *Console) holdsView(ctx context.Context, id *auth.Identity, f holdFilter) (templates.HoldsView, error) {
	var v templates.HoldsView
	open, count, err := c.openHolds(ctx, f)
	if err != nil {
		return v, err
	}
	var after *store.ListCursor
	if f.before != "" {
		if after, err = paging.DecodeCursor(f.before); err != nil {
			return v, err
		}
	}
	decided, err := c.Store.HoldList(ctx, f.params(&store.HoldListParams{Decided: true, After: after, Limit: decidedPage + 1}))
	if err != nil {
		return v, err
	}
	rights, err := c.rightsOf(ctx, id.Caller())
	if err != nil {
		return v, err
	}
	payloads, err := c.holdPayloads(ctx, append(append([]*store.Hold{}, open...), decided...))
	if err != nil {
		return v, err
	}
	names := c.userNames(ctx)
	v.OpenCount, v.OpenMore = count, max(count-len(open), 0)
	for _, h := range open {
		v.Open = append(v.Open, c.holdRow(h, payloads[h.ItemID], rights, names))
	}
	if len(decided) > decidedPage {
		decided = decided[:decidedPage]
		last := decided[decidedPage-1]
		q := f.query()
		q.Set("before", paging.EncodeCursor(decidedAt(last), last.ID))
		v.DecidedNext = templSafe("/holds?" + q.Encode() + "#decided-heading")
	}
	if f.before != "" {
		v.DecidedFirst = templSafe("/holds?" + f.query().Encode() + "#decided-heading")
	}
	for _, h := range decided {
		v.Decided = append(v.Decided, c.holdRow(h, payloads[h.ItemID], rights, names))
	}
	live := f.query()
	v.LiveURL = "/holds/live?" + live.Encode()
	v.Filtered = f.workflow != "" || f.requester != ""
	v.ClearURL = "/holds"

	wfs, err := c.Store.WorkflowList(ctx)
	if err != nil {
		return v, err
	}
	for _, wf := range wfs {
		if wf.Command != "" {
			v.Workflows = append(v.Workflows, templates.Option{Value: wf.Command, Label: wf.Command, Selected: wf.Command == f.workflow})
		}
	}
	v.Requesters = requesterOptions(open, names, f.requester)
	return v, nil
}

// requesterOptions offers the console's users and whoever asked for the
// open holds shown, by name.
func requesterOptions(open []*store.Hold, names map[string]string, selected string) []templates.Option {
	seen := map[string]bool{}
	var out []templates.Option
	add := func(uid string) {
		if uid == "" || seen[uid] {
			return
		}
		seen[uid] = true
		out = append(out, templates.Option{Value: uid, Label: requester(uid, names), Selected: uid == selected})
	}
	for uid := range names {
		add(uid)
	}
	for _, h := range open {
		add(h.OwnerUID)
	}
	add(selected)
	sort.Slice(out, func(i, j int) bool { return strings.ToLower(out[i].Label) < strings.ToLower(out[j].Label) })
	return out
}

func decidedAt(h *store.Hold) time.Time {
	if h.DecidedAt != nil {
		return *h.DecidedAt
	}
	return h.CreatedAt
}

func (c *Console) holdList(w http.ResponseWriter, r *http.Request) {
	v, err := c.holdsView(r.Context(), identity(r), parseHoldFilter(r.URL.Query()))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, "Holds", "holds")
	c.render(w, r, http.StatusOK, templates.HoldsPage(v))
}

// holdLive answers the open queue's poll. The page sends the cards it shows
// ("shown" = id:sig); the answer is out-of-band swaps only: cards that
// arrived are appended, cards that changed are replaced, decided ones are
// removed, and the counts are set. Nothing else on the page is touched, and
// the page's script refuses a swap of any card with focus or typed text.
func (c *Console) holdLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := parseHoldFilter(r.URL.Query())
	open, count, err := c.openHolds(ctx, f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	shown := map[string]string{}
	var order []string
	for _, s := range r.URL.Query()["shown"] {
		id, sig, _ := strings.Cut(s, ":")
		if id != "" {
			shown[id] = sig
			order = append(order, id)
		}
	}
	rights, err := c.rightsOf(ctx, identity(r).Caller())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	payloads, err := c.holdPayloads(ctx, open)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	names := c.userNames(ctx)
	v := templates.HoldsLive{CSRF: from(ctx).session.CSRFToken, OpenCount: count, NavCount: c.openHoldCount(ctx), Empty: len(open) == 0}
	current := map[string]bool{}
	for _, h := range open {
		current[h.ID] = true
		row := c.holdRow(h, payloads[h.ItemID], rights, names)
		sig, ok := shown[h.ID]
		switch {
		case !ok:
			v.Add = append(v.Add, row)
		case sig != row.Sig:
			v.Replace = append(v.Replace, row)
		}
	}
	for _, id := range order {
		if !current[id] {
			v.Remove = append(v.Remove, id)
		}
	}
	c.render(w, r, http.StatusOK, templates.HoldsLiveFragment(v))
}

// holdView is the hold page. attempt, when not 0, is the audited attempt
// the page was sent to show (PRG): ?attempt=<audit id>, so the page can be
// reloaded and shared with its message. A refused attempt of the viewer's
// own gives its comment and edited output back to the form, so nothing
// typed is lost; anyone else following the link sees the form as it is.
func (c *Console) holdView(ctx context.Context, h *store.Hold, id *auth.Identity, attempt int64) (templates.HoldView, error) {
	var v templates.HoldView
	rights, err := c.rightsOf(ctx, id.Caller())
	if err != nil {
		return v, err
	}
	payloads, err := c.holdPayloads(ctx, []*store.Hold{h})
	if err != nil {
		return v, err
	}
	names := c.userNames(ctx)
	v.Hold = c.holdRow(h, payloads[h.ItemID], rights, names)
	v.Hold.SlackURL = c.sessionSlackURL(ctx, h.SessionID)
	ds, err := c.Store.HoldDecisionList(ctx, h.ID)
	if err != nil {
		return v, err
	}
	v.Audit = c.auditRows(ds, names)
	for i, d := range ds {
		if d.ID != attempt || attempt == 0 {
			continue
		}
		v.Audit[i].Highlight = true
		v.Attempt = attemptNote(v.Audit[i], id.Username)
		if v.Attempt.Refused && d.DecidedBy == id.Name() && h.Status == store.HoldOpen {
			v.Hold.DraftComment = d.Comment
			if d.Output != nil {
				v.Hold.DraftOutput = *d.Output
			}
		}
	}
	if h.EditedOutput != nil {
		v.Diff = lineDiff(h.Output, *h.EditedOutput)
		if c.Engine != nil {
			gs, err := c.Engine.GuardOutput(ctx, h.RunID, *h.EditedOutput)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return v, err
			}
			for _, g := range gs {
				v.EditedGuards = append(v.EditedGuards, templates.GuardView{Check: g.Check, Passed: g.Passed, Detail: g.Detail})
			}
		}
	}
	return v, nil
}

func (c *Console) auditRows(ds []*store.HoldDecision, names map[string]string) []templates.AuditRow {
	out := make([]templates.AuditRow, 0, len(ds))
	for _, d := range ds {
		row := templates.AuditRow{ID: d.ID, When: c.ago(d.CreatedAt), Who: requester(d.DecidedBy, names), Via: d.Via, Decision: d.Decision,
			Outcome: d.Outcome, Reason: d.Reason, Detail: d.Reason}
		if d.Comment != "" {
			row.Detail = strings.TrimSpace(row.Detail + " “" + d.Comment + "”")
		}
		if d.Output != nil {
			row.Detail = strings.TrimSpace(row.Detail + " (with an edited output)")
		}
		out = append(out, row)
	}
	return out
}

func (c *Console) holdShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	h, err := c.Store.HoldGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	attempt, _ := strconv.ParseInt(r.URL.Query().Get("attempt"), 10, 64)
	v, err := c.holdView(ctx, h, identity(r), attempt)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, v.Hold.Title, "holds")
	c.render(w, r, http.StatusOK, templates.HoldPage(v))
}

// attemptNote says what became of a decision attempt, to the person who
// made it or to anyone the link was shared with.
func attemptNote(a templates.AuditRow, me string) *templates.AttemptNote {
	verb := a.Decision
	switch a.Decision {
	case "approve":
		verb = "approval"
	case "reject":
		verb = "rejection"
	}
	who := a.Who + "'s " + verb
	if a.Who == me {
		who = "Your " + verb
	}
	n := &templates.AttemptNote{ID: a.ID}
	switch a.Outcome {
	case store.AttemptAccepted:
		n.Text = who + " was recorded."
	case store.AttemptConflict:
		n.Text, n.Refused = who+" was not recorded: "+a.Reason, true
	default:
		n.Text, n.Refused = who+" was refused: "+a.Reason, true
	}
	return n
}

// holdDecide posts a decision through engine.Decide, the same call Slack and
// the API make, so the Slack card is updated and the attempt audited. Every
// outcome redirects (post/redirect/get): an accepted decision to the run, a
// refused or conflicting one to the hold page showing that audited attempt.
func (c *Console) holdDecide(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	h, err := c.Store.HoldGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	back := "/holds/" + h.ID
	if c.Engine == nil {
		c.redirect(w, r, back, "The workflow engine is not running, so holds cannot be decided now.", true)
		return
	}
	decision := r.PostFormValue("decision")
	comment := strings.TrimSpace(r.PostFormValue("comment"))
	if reason := strings.TrimSpace(r.PostFormValue("reason")); decision == "reject" && reason != "" {
		comment = reason
	}
	id := identity(r)
	out, err := c.Engine.Decide(ctx, engine.DecideParams{HoldID: h.ID, Decision: decision, Comment: comment,
		Output: r.PostFormValue("output"), Decider: id.Caller()})
	switch {
	case errors.Is(err, store.ErrForbidden), errors.Is(err, store.ErrConflict):
		c.redirect(w, r, c.attemptURL(ctx, h.ID, id.Name(), back), "", false)
		return
	case errors.Is(err, store.ErrInvalid):
		c.redirect(w, r, back, store.ReasonOf(err), true)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.Log.InfoContext(ctx, "console hold decision", slog.String("hold_id", out.ID), slog.String("run_id", out.RunID),
		slog.String("decision", decision), slog.String("by", id.Username), slog.String("status", out.Status))
	msg := "Rejected: the run is cancelled."
	switch {
	case out.Status == store.HoldApproved:
		msg = "Approved: the run resumes and publishes."
	case out.Status == store.HoldOpen:
		msg = fmt.Sprintf("Approval recorded (%d of %d needed).", len(out.Approvals), out.RequiredApprovals)
	}
	c.redirect(w, r, string(runURL(out.RunID)), msg, false)
}

// attemptURL is the hold page showing the newest attempt by who that was not
// accepted (the one just refused), or back when there is none.
func (c *Console) attemptURL(ctx context.Context, holdID, who, back string) string {
	ds, err := c.Store.HoldDecisionList(ctx, holdID)
	if err != nil {
		return back
	}
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].DecidedBy == who && ds[i].Outcome != store.AttemptAccepted {
			return back + "?attempt=" + strconv.FormatInt(ds[i].ID, 10) + "#attempt"
		}
	}
	return back
}
