package api

import (
	"net/http"

	"github.com/holdfast-bot/holdfast/engine/tracing"
)

// joinTrace continues the caller's trace when a request carries a W3C
// traceparent header: what it enqueues (and that item's run) joins the
// client's trace instead of starting one of its own.
func joinTrace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			r = r.WithContext(tracing.Join(r.Context(), tp))
		}
		next.ServeHTTP(w, r)
	})
}
