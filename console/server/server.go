// Package server composes Holdfast's HTTP surface: health, metrics, the JSON
// API, the Slack endpoints and the console share one router.
package server

import (
	"crypto/subtle"
	"mime"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/store"
)

// Deps are the parts mounted on the router; nil parts are left out.
type Deps struct {
	Store store.Store
	API   *api.API
	// Metrics serves /metrics; guarded by InternalKey when that is set.
	Metrics     http.Handler
	InternalKey string
	// Slack serves /slack/* (HTTP mode).
	Slack http.Handler
	// Console serves every other path.
	Console http.Handler
}

// Handler returns the root handler.
func Handler(d Deps) http.Handler {
	r := chi.NewRouter()
	// GetHead: a HEAD (a load balancer's or uptime check's probe of
	// /healthz, say) is answered by the GET route, not the console's
	// sign-in wall.
	r.Use(SecurityHeaders, middleware.Recoverer, middleware.GetHead)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := d.Store.Ping(r.Context()); err != nil {
			api.WriteError(w, http.StatusServiceUnavailable, "store unavailable")
			return
		}
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if d.Metrics != nil {
		r.With(bearerKey(d.InternalKey, "metrics")).Handle("/metrics", d.Metrics)
	}
	// Profiles behind the internal key, so the next profile needs no
	// scratch build; without a key the routes do not exist.
	r.Route("/debug", func(r chi.Router) {
		if d.InternalKey == "" {
			r.HandleFunc("/*", func(w http.ResponseWriter, r *http.Request) {
				api.WriteError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
			})
			return
		}
		r.With(bearerKey(d.InternalKey, "profiles")).Mount("/", middleware.Profiler())
	})
	if d.API != nil {
		r.Mount("/api", d.API.Routes())
	}
	if d.Slack != nil {
		r.Mount("/slack", d.Slack)
	}
	if d.Console != nil {
		r.Mount("/", d.Console)
	}
	return r
}

// bearerKey guards a route with 'Authorization: Bearer <key>' (which
// Prometheus scrape configs and curl support), compared in constant time;
// with no key configured the route is open.
func bearerKey(key, what string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, _ := auth.BearerToken(r.Header.Get("Authorization"))
			if key != "" && subtle.ConstantTimeCompare([]byte(token), []byte(key)) != 1 {
				api.WriteError(w, http.StatusUnauthorized, what+" need 'Authorization: Bearer <internal key>'")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Content security policies. Console pages allow no inline script or style
// at all, so no nonce is needed: every script is a same-origin file and
// every hook a data- attribute. Everything that is not HTML (JSON, metrics,
// Slack answers, assets, plain-text errors) may load nothing and be framed
// by nobody.
const (
	HTMLPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	NonHTMLPolicy = "default-src 'none'; frame-ancestors 'none'"
)

// SecurityHeaders is the one place response security headers are set, for
// every route the router serves (API, /healthz, /metrics, Slack, console):
// nosniff, a referrer policy and no framing on all of them, and the content
// security policy chosen by what the response turns out to be — HTMLPolicy
// for HTML, NonHTMLPolicy for anything else. The choice is made when the
// handler writes its header, because only then is its Content-Type known.
func SecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(&cspWriter{ResponseWriter: w}, r)
	})
}

// cspWriter sets Content-Security-Policy from the Content-Type at the
// moment the header is written.
type cspWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *cspWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		h := w.Header()
		policy := NonHTMLPolicy
		if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && mt == "text/html" {
			policy = HTMLPolicy
		}
		h.Set("Content-Security-Policy", policy)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *cspWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		if w.Header().Get("Content-Type") == "" {
			// What net/http would sniff anyway, decided here so the
			// policy matches the type the browser is told.
			w.Header().Set("Content-Type", http.DetectContentType(b))
		}
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through, for handlers that stream.
func (w *cspWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *cspWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
