package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

func (c *Console) holdRoutes(r chi.Router) {
	r.Get("/holds", c.holdList)
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
	out := make([]templates.Link, 0, len(hs))
	for _, h := range hs {
		out = append(out, templates.Link{Label: holdLabel(h), URL: holdURL(h.ID)})
	}
	return out
}

func holdLabel(h *store.Hold) string {
	if h.GateLabel != "" {
		return h.GateLabel
	}
	return "Review " + h.Command
}

// holdCardStatus shows a transcript's hold card as the hold is now.
func (c *Console) holdCardStatus(ctx context.Context, card *templates.HoldCard, holdID string) {
	if holdID == "" {
		return
	}
	if h, err := c.Store.HoldGetByID(ctx, holdID); err == nil {
		card.Status, card.DecidedBy, card.Via, card.Comment = h.Status, h.DecidedBy, h.DecidedVia, h.Comment
	}
}

// requester names an item's owner for people: a console user by name, a
// Slack user by id, an API key, or the scheduler.
func requester(owner string, names map[string]string) string {
	switch {
	case owner == "":
		return "unknown"
	case names[owner] != "":
		return names[owner]
	case owner == "engine":
		return "the scheduler"
	case strings.HasPrefix(owner, "slack:"):
		return "Slack user " + strings.TrimPrefix(owner, "slack:")
	case strings.HasPrefix(owner, "key:"):
		return "API key " + strings.TrimPrefix(owner, "key:")
	default:
		return owner
	}
}

// holdRow builds a hold's view for the viewer id.
func (c *Console) holdRow(h *store.Hold, id *auth.Identity, names map[string]string) templates.HoldRow {
	row := templates.HoldRow{ID: h.ID, URL: holdURL(h.ID), RunURL: runURL(h.RunID), RunID: h.RunID, Command: h.Command,
		Workflow: h.WorkflowName, GateLabel: holdLabel(h), Requester: requester(h.OwnerUID, names), Status: h.Status,
		Age: c.ago(h.CreatedAt), PreviewHTML: renderMarkdown(h.Preview), PreviewText: h.Output, DecidedBy: h.DecidedBy,
		DecidedVia: h.DecidedVia, Comment: h.Comment, DecideURL: "/holds/" + h.ID + "/decision"}
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
	if h.Status == store.HoldOpen && id != nil && store.CanDecide(id.Role) {
		row.CanDecide = true
		if !h.SelfApproval && h.OwnerUID == "user:"+id.UserID {
			row.WhyNot = "You asked for this run, so another steward must approve it; you may still reject it."
		}
	}
	return row
}

func (c *Console) holdsView(ctx context.Context, id *auth.Identity) (templates.HoldsView, error) {
	var v templates.HoldsView
	open, err := c.Store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: 200})
	if err != nil {
		return v, err
	}
	var decided []*store.Hold
	for _, st := range []string{store.HoldApproved, store.HoldRejected} {
		hs, err := c.Store.HoldList(ctx, &store.HoldListParams{Status: st, Limit: 50})
		if err != nil {
			return v, err
		}
		decided = append(decided, hs...)
	}
	sort.Slice(decided, func(i, j int) bool { return decidedAt(decided[i]).After(decidedAt(decided[j])) })
	if len(decided) > 50 {
		decided = decided[:50]
	}
	names := c.userNames(ctx)
	sig := sha256.New()
	for _, h := range open {
		v.Open = append(v.Open, c.holdRow(h, id, names))
		fmt.Fprintf(sig, "%s:%d;", h.ID, len(h.Approvals))
	}
	v.OpenSig = hex.EncodeToString(sig.Sum(nil)[:8])
	for _, h := range decided {
		v.Decided = append(v.Decided, c.holdRow(h, id, names))
	}
	return v, nil
}

func decidedAt(h *store.Hold) time.Time {
	if h.DecidedAt != nil {
		return *h.DecidedAt
	}
	return h.CreatedAt
}

func (c *Console) holdList(w http.ResponseWriter, r *http.Request) {
	v, err := c.holdsView(r.Context(), identity(r))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if q := r.URL.Query(); q.Get("fragment") == "open" {
		// The queue's live part refreshes itself; a form being typed into
		// would be wiped, so the fragment is only sent when it changed.
		if q.Get("sig") == v.OpenSig {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		v.Page = templates.Page{CSRF: from(r.Context()).session.CSRFToken}
		c.render(w, r, http.StatusOK, templates.OpenHolds(v))
		return
	}
	v.Page = c.page(w, r, "Holds", "holds")
	c.render(w, r, http.StatusOK, templates.HoldsPage(v))
}

func (c *Console) holdView(ctx context.Context, h *store.Hold, id *auth.Identity) (templates.HoldView, error) {
	v := templates.HoldView{Hold: c.holdRow(h, id, c.userNames(ctx))}
	ds, err := c.Store.HoldDecisionList(ctx, h.ID)
	if err != nil {
		return v, err
	}
	v.Audit = c.auditRows(ds)
	return v, nil
}

func (c *Console) auditRows(ds []*store.HoldDecision) []templates.AuditRow {
	out := make([]templates.AuditRow, 0, len(ds))
	for _, d := range ds {
		row := templates.AuditRow{When: c.ago(d.CreatedAt), Who: d.DecidedBy, Via: d.Via, Decision: d.Decision, Outcome: d.Outcome, Detail: d.Reason}
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
	h, err := c.Store.HoldGetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.renderHold(w, r, h, http.StatusOK, "")
}

func (c *Console) renderHold(w http.ResponseWriter, r *http.Request, h *store.Hold, status int, errMsg string) {
	v, err := c.holdView(r.Context(), h, identity(r))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Error = errMsg
	v.Page = c.page(w, r, holdLabel(h), "holds")
	c.render(w, r, status, templates.HoldPage(v))
}

// holdDecide posts a decision through engine.Decide, the same call Slack and
// the API make, so the Slack card is updated and the attempt audited.
func (c *Console) holdDecide(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	h, err := c.Store.HoldGetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if c.Engine == nil {
		c.renderHold(w, r, h, http.StatusServiceUnavailable, "The workflow engine is not running, so holds cannot be decided now.")
		return
	}
	decision := r.PostFormValue("decision")
	comment := strings.TrimSpace(r.PostFormValue("comment"))
	id := identity(r)
	out, err := c.Engine.Decide(ctx, engine.DecideParams{HoldID: h.ID, Decision: decision, Comment: comment,
		Output: r.PostFormValue("output"), Decider: id.Caller()})
	if status, ok := refusalStatus(err); ok {
		c.renderHold(w, r, h, status, store.ReasonOf(err))
		return
	} else if err != nil {
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
