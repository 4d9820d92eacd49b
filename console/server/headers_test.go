package server_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/server"
)

// TestSecurityHeadersOnEveryRoute (SPEC §7): every response, the API,
// /healthz, /metrics and Slack's included, carries nosniff and a referrer
// policy; HTML gets the console's policy, anything else
// "default-src 'none'; frame-ancestors 'none'".
func TestSecurityHeadersOnEveryRoute(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	login := s.do(t, nil, request{method: http.MethodGet, path: "/login"})
	css := regexp.MustCompile(`href="(/static/[^"]+\.css)"`).FindSubmatch(login.body)
	require.NotNil(t, css)
	for _, tc := range []struct {
		name string
		r    request
		want int
		html bool
	}{
		{"APIJSON", request{method: http.MethodGet, path: "/api/workflows", as: "viewer"}, http.StatusOK, false},
		{"APIError", request{method: http.MethodGet, path: "/api/workflows"}, http.StatusUnauthorized, false},
		{"APINotFound", request{method: http.MethodGet, path: "/api/nope", as: "viewer"}, http.StatusNotFound, false},
		{"Healthz", request{method: http.MethodGet, path: "/healthz"}, http.StatusOK, false},
		{"HealthzHead", request{method: http.MethodHead, path: "/healthz"}, http.StatusOK, false},
		{"Metrics", request{method: http.MethodGet, path: "/metrics", header: map[string]string{"Authorization": "Bearer " + internalKey}}, http.StatusOK, false},
		{"MetricsRefused", request{method: http.MethodGet, path: "/metrics"}, http.StatusUnauthorized, false},
		{"Profile", request{method: http.MethodGet, path: "/debug/pprof/heap?debug=1", header: map[string]string{"Authorization": "Bearer " + internalKey}}, http.StatusOK, false},
		{"ProfileRefused", request{method: http.MethodGet, path: "/debug/pprof/"}, http.StatusUnauthorized, false},
		{"SlackUnsigned", request{method: http.MethodPost, path: "/slack/events", body: []byte(`{}`)}, http.StatusUnauthorized, false},
		{"SlackURLVerification", request{method: http.MethodPost, path: "/slack/events", as: "slack",
			body: []byte(`{"type":"url_verification","challenge":"c"}`)}, http.StatusOK, false},
		{"SlackNoRoute", request{method: http.MethodPost, path: "/slack/nope", as: "slack"}, http.StatusNotFound, false},
		{"ConsolePage", request{method: http.MethodGet, path: "/login"}, http.StatusOK, true},
		{"ConsoleRedirect", request{method: http.MethodGet, path: "/sessions"}, http.StatusSeeOther, true},
		{"ConsoleAsset", request{method: http.MethodGet, path: string(css[1])}, http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *browser
			if tc.r.as == "cookie" {
				b = s.signIn(t, "viewer")
			}
			if tc.name == "ConsoleRedirect" {
				b = &browser{http: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
				tc.r.as = "cookie"
			}
			res := s.do(t, b, tc.r)
			require.Equal(t, tc.want, res.status, string(res.body))
			require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
			require.Equal(t, "same-origin", res.header.Get("Referrer-Policy"))
			require.Equal(t, "DENY", res.header.Get("X-Frame-Options"))
			want := server.NonHTMLPolicy
			if tc.html {
				want = server.HTMLPolicy
			}
			require.Equal(t, want, res.header.Get("Content-Security-Policy"), "Content-Type %q", res.header.Get("Content-Type"))
		})
	}
}

// TestProfilesNeedTheInternalKey: with no internal key configured the
// profile routes do not exist (404), however they are asked for.
func TestProfilesNeedTheInternalKey(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(server.Handler(server.Deps{}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}
