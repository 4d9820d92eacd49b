package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

const testPassword = "correct horse battery"

// bundle is one console over a real SQLite file behind the real router.
type bundle struct {
	db      store.Store
	lib     *library.Service
	sess    *sessions.Service
	eng     *engine.Engine
	console *web.Console
	srv     *httptest.Server
	users   map[string]*store.User // by username: admin, steward, viewer
}

func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup with the console's deps adjusted by opt (a Slack for
// permalinks, say) before it is built.
func setupWith(t testing.TB, opt func(*web.Deps)) *bundle {
	t.Helper()
	return setupBundle(t, opt, true)
}

// setupBundle builds the bundle; with start false the engine answers rules
// (rights, enqueues) but runs nothing, so a benchmark can lay out runs and
// holds through the store without a runner claiming them.
func setupBundle(t testing.TB, opt func(*web.Deps), start bool) *bundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t, testdb.Options{SQLiteSync: "normal"})
	log := slog.New(slog.DiscardHandler)
	lib := library.New(db, log)
	require.NoError(t, lib.SeedExamples(ctx))
	models := model.NewRegistry("template", model.Config{})
	eng := engine.New(engine.Config{Workers: 2, DisableScheduler: true, RetryBase: time.Millisecond}, db, models, log)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if start {
			_ = eng.Start(runCtx)
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	sess := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "template"}, eng, log)
	t.Cleanup(sess.Close) // before the engine and database stop: background turns settle first
	b := &bundle{db: db, lib: lib, sess: sess, eng: eng, users: map[string]*store.User{}}
	hash, err := bcrypt.GenerateFromPassword([]byte(testPassword), bcrypt.MinCost)
	require.NoError(t, err)
	for _, role := range []string{store.RoleAdmin, store.RoleSteward, store.RoleViewer} {
		u, err := db.UserCreate(ctx, &store.User{Username: role, PasswordHash: string(hash), Role: role})
		require.NoError(t, err)
		b.users[role] = u
	}
	deps := web.Deps{Store: db, Library: lib, Sessions: sess, Engine: eng, Log: log}
	if opt != nil {
		opt(&deps)
	}
	b.console = web.New(deps)
	b.srv = httptest.NewServer(server.Handler(server.Deps{
		Store: db,
		API: api.New(api.Deps{Store: db, Library: lib, Log: log, Cookie: b.console.Cookie, CSRF: b.console.CSRF,
			Sessions: sess, Engine: eng}),
		Console: b.console.Handler(),
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// client is a browser-like HTTP client: a cookie jar, no redirect following
// (tests assert the redirects themselves).
type client struct {
	t    testing.TB
	b    *bundle
	http *http.Client
	csrf string
	// base, when set, is the server this client talks to instead of b's.
	base string
}

func (c *client) url() string {
	if c.base != "" {
		return c.base
	}
	return c.b.srv.URL
}

// newServer serves h for the test's lifetime and answers its URL.
func newServer(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (b *bundle) client(t testing.TB) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, b: b, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

var (
	csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`)
)

// do sends a request with browser-like same-origin headers unless h
// overrides them, and returns status and body.
func (c *client) do(method, path string, form url.Values, h map[string]string) (int, string, *http.Response) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.url()+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", c.url())
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range h {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	if m := csrfMeta.FindStringSubmatch(string(b)); m != nil {
		c.csrf = m[1]
	}
	return resp.StatusCode, string(b), resp
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	status, body, _ := c.do(http.MethodGet, path, nil, nil)
	return status, body
}

// post submits a console form with the session's CSRF token.
func (c *client) post(path string, form url.Values) (int, string, *http.Response) {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf_token", c.csrf)
	return c.do(http.MethodPost, path, form, nil)
}

// postFollow submits a form and follows its redirect (post/redirect/get),
// answering the page it lands on and that page's path.
func (c *client) postFollow(path string, form url.Values) (int, string, string) {
	c.t.Helper()
	status, body, resp := c.post(path, form)
	if status != http.StatusSeeOther {
		return status, body, path
	}
	loc := resp.Header.Get("Location")
	if i := strings.Index(loc, "#"); i >= 0 {
		loc = loc[:i]
	}
	status, body = c.get(loc)
	return status, body, loc
}

func (c *client) signIn(username, password string) (int, *http.Response) {
	c.t.Helper()
	status, _, resp := c.signInPage(username, password)
	return status, resp
}

// signInPage is signIn answering the page too.
func (c *client) signInPage(username, password string) (int, string, *http.Response) {
	c.t.Helper()
	_, page, _ := c.do(http.MethodGet, "/login", nil, nil)
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(c.t, m, "the sign-in form carries a CSRF token")
	status, page, resp := c.do(http.MethodPost, "/login", url.Values{"csrf_token": {m[1]}, "username": {username}, "password": {password}}, nil)
	if status == http.StatusSeeOther {
		c.get("/sessions") // pick up the session's CSRF token
	}
	return status, page, resp
}

func (b *bundle) signedIn(t testing.TB, username string) *client {
	t.Helper()
	c := b.client(t)
	status, _ := c.signIn(username, testPassword)
	require.Equal(t, http.StatusSeeOther, status)
	require.NotEmpty(t, c.csrf)
	return c
}

// session creates a session of the given kind with one event, as the
// bridge, the engine or a person would.
func (b *bundle) session(t testing.TB, title, tag, via string) *store.Session {
	t.Helper()
	ctx := context.Background()
	s, err := b.sess.Create(ctx, sessions.CreateParams{Title: title, Tag: tag, Source: sessions.Source{Via: via},
		Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Actor: "U1", Payload: map[string]any{"text": "hello from " + title}}}})
	require.NoError(t, err)
	return s
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// enqueue queues a /draft-memo item (Approval hold) as requester owner and
// waits for its hold to open.
func (b *bundle) heldRun(t testing.TB, owner, brief string) (*store.QueueItem, *store.Hold) {
	t.Helper()
	return b.heldRunOf(t, "/draft-memo", owner, brief)
}

// heldRunOf is heldRun of any workflow that holds its output.
func (b *bundle) heldRunOf(t testing.TB, command, owner, brief string) (*store.QueueItem, *store.Hold) {
	t.Helper()
	ctx := context.Background()
	item, _, err := b.eng.Enqueue(ctx, engine.EnqueueParams{Command: command, DedupeKey: brief,
		Payload: map[string]any{"brief": brief, "title": "Draft: " + brief}, OwnerUID: owner})
	require.NoError(t, err)
	var hold *store.Hold
	require.Eventually(t, func() bool {
		// (testify polls on its own goroutine: no require in here.)
		hs, err := b.db.HoldList(ctx, &store.HoldListParams{SessionID: item.SessionID, Status: store.HoldOpen})
		if err == nil && len(hs) == 1 {
			hold = hs[0]
		}
		return hold != nil
	}, 20*time.Second, 20*time.Millisecond, "the run suspends at its hold")
	return item, hold
}
