package web

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/holdfast-bot/holdfast/store"
)

// errCrossSite and errBadToken are what a refused request is told.
var (
	errCrossSite = errors.New("cross-site request refused")
	errBadToken  = errors.New("missing or wrong CSRF token; reload the page and try again")
)

// checkCSRF is the one check every state-changing console request and every
// cookie-authenticated API write passes: the browser's own Fetch Metadata
// and Origin must not name another site, and the session's token must be
// presented (form field csrf_token or header X-CSRF-Token), compared in
// constant time.
func (c *Console) checkCSRF(r *http.Request, want string) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return errCrossSite
	}
	if o := r.Header.Get("Origin"); o != "" && !c.sameOrigin(r, o) {
		return errCrossSite
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		got = r.PostFormValue("csrf_token")
	}
	if want == "" || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errBadToken
	}
	return nil
}

// sameOrigin accepts the request's own host and the configured base URL.
func (c *Console) sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if u.Host == r.Host {
		return true
	}
	if c.BaseURL != "" {
		if b, err := url.Parse(c.BaseURL); err == nil && b.Scheme == u.Scheme && b.Host == u.Host {
			return true
		}
	}
	return false
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// csrfMiddleware guards every non-GET console route. readInput has read
// and checked the form already.
func (c *Console) csrfMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) {
			if err := c.checkCSRF(r, from(r.Context()).session.CSRFToken); err != nil {
				c.errorPage(w, r, http.StatusForbidden, "Request refused", err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxForm caps console form bodies (SPEC §7: 2 MiB, 413).
const maxForm = store.MaxRequestBytes

// readInput is the console's one input check, ahead of sign-in, CSRF and
// every handler (SPEC §7): a query string that does not parse is 400 (a
// malformed cursor is never a silent first page); a body past maxForm is
// 413 before anything else looks at it, CSRF included; a form that does not
// parse, or any field or query parameter (name or value) that is not
// UTF-8 or holds NUL, is 400. Handlers then read r.PostForm, already parsed.
func (c *Console) readInput(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", "The address's query string is malformed: "+err.Error())
			return
		}
		if err := store.CheckFields("query parameter", q); err != nil {
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", store.ReasonOf(err)+".")
			return
		}
		if safeMethod(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > maxForm {
			c.errorPage(w, r, http.StatusRequestEntityTooLarge, "Too large", fmt.Sprintf("A form may be at most %d bytes.", maxForm))
			return
		}
		// The whole body is read here, whatever its type, so the limit
		// holds for bodies ParseForm would not read.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForm))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				c.errorPage(w, r, http.StatusRequestEntityTooLarge, "Too large", fmt.Sprintf("A form may be at most %d bytes.", maxForm))
				return
			}
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseForm(); err != nil {
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
			return
		}
		if err := store.CheckFields("form field", r.PostForm); err != nil {
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", store.ReasonOf(err)+".")
			return
		}
		next.ServeHTTP(w, r)
	})
}
