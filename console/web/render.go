package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

const flashCookie = "holdfast_flash"

// render writes a component with status. A render error after headers are
// out can only be logged.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, comp templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := comp.Render(r.Context(), w); err != nil && !errors.Is(err, context.Canceled) {
		c.Log.ErrorContext(r.Context(), "render", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
}

// page builds the layout's view model for the signed-in user, taking any
// flash message left by the previous redirect.
func (c *Console) page(w http.ResponseWriter, r *http.Request, title, nav string) templates.Page {
	p := templates.Page{Title: title, Nav: nav}
	cur := from(r.Context())
	if cur == nil {
		return p
	}
	id := cur.id
	p.CSRF = cur.session.CSRFToken
	p.Viewer = &templates.Viewer{Name: id.Username, Role: id.Role, CanDecide: store.CanDecide(id.Role),
		CanAct: id.AtLeast(store.RoleSteward), IsAdmin: id.Role == store.RoleAdmin}
	if ck, err := r.Cookie(flashCookie); err == nil {
		if v, err := url.QueryUnescape(ck.Value); err == nil && len(v) > 1 {
			p.Flash, p.FlashErr = v[1:], v[0] == '!'
		}
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1})
	}
	p.OpenHolds = c.openHoldCount(r.Context())
	return p
}

// redirect answers a form post with 303 and a one-shot message.
func (c *Console) redirect(w http.ResponseWriter, r *http.Request, to, flash string, isErr bool) {
	if flash != "" {
		mark := "+"
		if isErr {
			mark = "!"
		}
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(mark + flash), Path: "/", MaxAge: 60,
			HttpOnly: true, Secure: c.secureCookies(r), SameSite: http.SameSiteLaxMode})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// errorPage answers with a full page for the status.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, status int, heading, msg string) {
	p := c.page(w, r, heading, "")
	c.render(w, r, status, templates.ErrorPage(templates.ErrorView{Page: p, Status: status, Heading: heading, Message: msg}))
}

// fail maps the sentinels to 404/409/400/403 pages; anything else is logged
// and answered 500 without its text.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch status, ok := refusalStatus(err); {
	case errors.Is(err, store.ErrNotFound):
		c.notFound(w, r)
	case ok:
		c.errorPage(w, r, status, http.StatusText(status), store.ReasonOf(err))
	default:
		c.Log.ErrorContext(r.Context(), "console request failed", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		c.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", "The error has been logged.")
	}
}

// refusalStatus maps the store's sentinels other than not-found to the
// status a page answers with: the console's one mapping of errors a user
// can act on (their sentence is store.ReasonOf).
func refusalStatus(err error) (int, bool) {
	switch {
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, true
	case errors.Is(err, store.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, true
	case errors.Is(err, store.ErrForbidden):
		return http.StatusForbidden, true
	case errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest, true
	}
	return 0, false
}

func identity(r *http.Request) *auth.Identity { return auth.From(r.Context()) }

// ago formats t relative to now with its exact value kept for hover.
func (c *Console) ago(t time.Time) templates.Time {
	if t.IsZero() {
		return templates.Time{}
	}
	return templates.Time{Ago: relTime(c.Now().Sub(t)), ISO: t.UTC().Format(time.RFC3339)}
}

func relTime(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h ago"
	default:
		return strconv.Itoa(int(d.Hours()/24)) + "d ago"
	}
}

func durationText(ms int64) string {
	switch {
	case ms <= 0:
		return ""
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	default:
		return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
