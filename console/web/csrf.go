package web

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"
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

// csrfMiddleware guards every non-GET console route.
func (c *Console) csrfMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := c.checkCSRF(r, from(r.Context()).session.CSRFToken); err != nil {
				c.errorPage(w, r, http.StatusForbidden, "Request refused", err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxForm caps console form bodies (an edited hold output is the largest).
const maxForm = 1 << 20
