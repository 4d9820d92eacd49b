// Package allow sets the Allow header of a 405, which RFC 9110 §15.5.6
// requires: chi writes it only in its own 405 handler, whose body is empty,
// and Holdfast's surfaces answer 405 with their own JSON or HTML.
package allow

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// methods are those a route may be registered for, in the order the
// header lists them.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Set sets Allow to the methods the request's path is routed for, asked
// of the root router from the top, so the answer does not depend on which
// subrouter refused. A path with a GET route answers HEAD too: the root
// serves HEAD with the GET route (middleware.GetHead).
func Set(w http.ResponseWriter, r *http.Request) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return
	}
	root := rctx.Routes
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	// Find leaves its state in the context it is given: a fresh one each
	// time.
	routed := func(m string) bool { return root.Match(chi.NewRouteContext(), m, path) }
	// Find stops where a subrouter is mounted (/api/memos, /api/memos/),
	// at a stand-in that takes every method, though chi serves such a path
	// with the subrouter's "/" route. No route is registered for TRACE, so
	// only a mount's stand-in matches it; then the methods are those Walk
	// lists for that "/" route.
	if mount := root.Find(chi.NewRouteContext(), http.MethodTrace, path); mount != "" {
		target := strings.TrimSuffix(mount, "/") + "/"
		var found []string
		_ = chi.Walk(root, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			if route == target {
				found = append(found, method)
			}
			return nil
		})
		routed = func(m string) bool { return slices.Contains(found, m) }
	}
	var allowed []string
	for _, m := range methods {
		if routed(m) || m == http.MethodHead && routed(http.MethodGet) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
	}
}
