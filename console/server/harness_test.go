package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

const (
	internalKey   = "internal-test-key"
	signingSecret = "slack-signing-secret"
	password      = "correct horse battery"
)

// stack is Holdfast's whole HTTP surface as `bot serve` assembles it — the
// API, the console, /healthz, /metrics and the Slack HTTP endpoints on the
// one router of server.Handler — over a real SQLite file, served by
// httptest. The engine is built but not started: tests run passes
// themselves (RunPass), so nothing changes behind their back. The Slack
// bridge's HTTP handler is mounted without starting its workers, so a
// delivery it accepts stays in the inbox, where a test can count it.
type stack struct {
	db   store.Store
	eng  *engine.Engine
	sess *sessions.Service
	srv  *httptest.Server
	// keys are API keys by name: viewer, steward, admin, and steward2 (a
	// second steward).
	keys map[string]string
}

func newStack(t testing.TB) *stack {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t, testdb.Options{SQLiteSync: "normal"})
	log := slog.New(slog.DiscardHandler)
	lib := library.New(db, log)
	require.NoError(t, lib.SeedExamples(ctx))
	models := model.NewRegistry("template", model.Config{})
	eng := engine.New(engine.Config{Workers: 1, DisableScheduler: true}, db, models, log)
	sess := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "template"}, eng, log)
	t.Cleanup(sess.Close)
	s := &stack{db: db, eng: eng, sess: sess, keys: map[string]string{}}

	for _, name := range []string{store.RoleViewer, store.RoleSteward, store.RoleAdmin, "steward2"} {
		role := strings.TrimSuffix(name, "2")
		key, hash := auth.NewAPIKey()
		_, err := db.APIKeyCreate(ctx, &store.APIKey{Name: name, Role: role, KeyHash: hash})
		require.NoError(t, err)
		s.keys[name] = key
		pw, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		require.NoError(t, err)
		_, err = db.UserCreate(ctx, &store.User{Username: name, PasswordHash: string(pw), Role: role})
		require.NoError(t, err)
	}

	// Slack's Web API is never called (the bridge's workers are not
	// started); the client points at a stand-in that refuses everything, so
	// nothing could reach the real Slack.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":false,"error":"not_in_this_test"}`)
	}))
	t.Cleanup(fake.Close)
	b := bridge.New(bridge.Config{SigningSecret: signingSecret}, db, slack.New("xoxb-test", slack.OptionAPIURL(fake.URL+"/api/")),
		eng, sess, log)
	require.NoError(t, eng.Registry().Register(b))

	console := web.New(web.Deps{Store: db, Library: lib, Sessions: sess, Engine: eng, Log: log})
	s.srv = httptest.NewServer(server.Handler(server.Deps{
		Store: db,
		API: api.New(api.Deps{Store: db, Library: lib, Log: log, Cookie: console.Cookie, CSRF: console.CSRF,
			Sessions: sess, Engine: eng, InternalKey: internalKey}),
		Metrics:     promhttp.HandlerFor(eng.Registry(), promhttp.HandlerOpts{}),
		InternalKey: internalKey,
		Slack:       b.Handler(),
		Console:     console.Handler(),
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// request is one HTTP request to the stack.
type request struct {
	method, path string
	// as is who sends it: an API key name, "cookie" (the browser, with its
	// CSRF token unless noCSRF), "slack" (signed as Slack signs), or "".
	as          string
	contentType string
	body        []byte
	header      map[string]string
	noCSRF      bool
}

// response is what came back.
type response struct {
	status int
	header http.Header
	body   []byte
}

// browser is a signed-in console user: a cookie jar and the page's CSRF
// token; redirects are not followed.
type browser struct {
	http *http.Client
	csrf string
}

var (
	csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`)
)

// signIn signs username in through the sign-in form.
func (s *stack) signIn(t testing.TB, username string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b := &browser{http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	page := s.do(t, b, request{method: http.MethodGet, path: "/login", as: "cookie"})
	m := csrfField.FindSubmatch(page.body)
	require.NotNil(t, m, "the sign-in form carries a CSRF token")
	form := url.Values{"csrf_token": {string(m[1])}, "username": {username}, "password": {password}}
	res := s.do(t, b, request{method: http.MethodPost, path: "/login", contentType: "application/x-www-form-urlencoded",
		body: []byte(form.Encode()), noCSRF: true, as: "cookie"})
	require.Equal(t, http.StatusSeeOther, res.status, string(res.body))
	page = s.do(t, b, request{method: http.MethodGet, path: "/sessions", as: "cookie"})
	tok := csrfMeta.FindSubmatch(page.body)
	require.NotNil(t, tok)
	b.csrf = string(tok[1])
	return b
}

// slackSign signs body exactly as Slack does:
// v0=hex(HMAC-SHA256(secret, "v0:<ts>:<body>")).
func slackSign(ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(signingSecret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// do sends r (as the browser b when r.as is "cookie").
func (s *stack) do(t testing.TB, b *browser, r request) response {
	t.Helper()
	req, err := http.NewRequest(r.method, s.srv.URL+r.path, bytes.NewReader(r.body))
	require.NoError(t, err)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	client := http.DefaultClient
	switch r.as {
	case "":
	case "cookie":
		client = b.http
		if r.method != http.MethodGet {
			req.Header.Set("Origin", s.srv.URL)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			if !r.noCSRF && b.csrf != "" {
				req.Header.Set("X-CSRF-Token", b.csrf)
			}
		}
	case "slack":
		ts := time.Now().Unix()
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("X-Slack-Signature", slackSign(ts, r.body))
	default:
		key, ok := s.keys[r.as]
		require.True(t, ok, "no key %q", r.as)
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}
