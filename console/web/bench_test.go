package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// BenchmarkSessionsPage100k times the sessions page, server side (auth,
// listing query, view model, templ render), over 100,000 sessions of every
// origin, and reports the median as well as the mean.
func BenchmarkSessionsPage100k(b *testing.B) {
	bd := setup(b)
	ctx := context.Background()
	origins := []struct {
		tag, via string
	}{{"slack:C%d:1.%d", sessions.ViaSlack}, {"workflow:itm_%d_%d", sessions.ViaEngine}, {"", sessions.ViaConsole}, {"workflow:x%d_%d", sessions.ViaEngine}}
	for i := range 100_000 {
		o := origins[i%len(origins)]
		tag := ""
		if o.tag != "" {
			tag = fmt.Sprintf(o.tag, i, i)
		}
		_, err := bd.sess.Create(ctx, sessions.CreateParams{Title: fmt.Sprintf("Session %d about otters", i), Tag: tag,
			Capabilities: []string{"chat", "enqueue"}, Source: sessions.Source{Via: o.via},
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Actor: "U1", Payload: map[string]any{"text": "hi"}}}})
		require.NoError(b, err)
	}
	c := bd.signedIn(b, "viewer")
	cookie := c.http.Jar.Cookies(mustURL(b, bd.srv.URL))
	h := bd.srv.Config.Handler

	for _, bc := range []struct{ name, path string }{
		{"Default", "/sessions"},
		{"AllOrigins", "/sessions?origin=user,channel,workflow,api,agent"},
		{"Filtered", "/sessions?q=98+about"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, bc.path, nil)
				for _, ck := range cookie {
					req.AddCookie(ck)
				}
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, req)
				times = append(times, time.Since(start))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "session-row") {
					b.Fatalf("status %d", rec.Code)
				}
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
		})
	}
}
