package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
)

func sessionCookie(t *testing.T, resp *http.Response) string {
	t.Helper()
	for _, ck := range resp.Cookies() {
		if ck.Name == "holdfast_session" {
			require.True(t, ck.HttpOnly)
			require.Equal(t, http.SameSiteLaxMode, ck.SameSite)
			return ck.Value
		}
	}
	t.Fatal("no session cookie set")
	return ""
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("WrongPasswordRefused", func(t *testing.T) {
		t.Parallel()
		c := b.client(t)
		status, _ := c.signIn("steward", "nope")
		require.Equal(t, http.StatusUnauthorized, status)
		status, _ = c.signIn("nobody", "nope")
		require.Equal(t, http.StatusUnauthorized, status, "an unknown user gets the same answer")
		status, _ = c.get("/workflows")
		require.Equal(t, http.StatusSeeOther, status, "still signed out")
	})

	t.Run("CookieHoldsSecretStoreHoldsHash", func(t *testing.T) {
		t.Parallel()
		c := b.client(t)
		status, resp := c.signIn("viewer", testPassword)
		require.Equal(t, http.StatusSeeOther, status)
		require.Equal(t, "/", resp.Header.Get("Location"), "signing in lands on Home")
		id, secret, ok := strings.Cut(sessionCookie(t, resp), ".")
		require.True(t, ok)
		s, err := b.db.ConsoleSessionGetByID(ctx, id)
		require.NoError(t, err)
		require.NotEqual(t, secret, s.SecretHash)
		require.NotContains(t, s.SecretHash, secret)

		forged := b.client(t)
		u, _ := url.Parse(b.srv.URL)
		forged.http.Jar.SetCookies(u, []*http.Cookie{{Name: "holdfast_session", Value: id + ".wrong-secret"}})
		status, _ = forged.get("/workflows")
		require.Equal(t, http.StatusSeeOther, status, "a session id without its secret is worthless")
	})

	t.Run("RotatedAtSignInEndedAtSignOut", func(t *testing.T) {
		t.Parallel()
		c := b.client(t)
		_, resp := c.signIn("admin", testPassword)
		first := sessionCookie(t, resp)
		// Signed in, GET /login redirects; take a form from a fresh browser
		// and submit it with this one's cookies, as a second tab would.
		fresh := b.client(t)
		_, page, _ := fresh.do(http.MethodGet, "/login", nil, nil)
		tok := csrfField.FindStringSubmatch(page)[1]
		u, _ := url.Parse(b.srv.URL)
		c.http.Jar.SetCookies(u, []*http.Cookie{{Name: "holdfast_login", Value: tok}})
		status, _, resp := c.do(http.MethodPost, "/login", url.Values{"csrf_token": {tok}, "username": {"admin"}, "password": {testPassword}}, nil)
		require.Equal(t, http.StatusSeeOther, status)
		c.get("/workflows")
		second := sessionCookie(t, resp)
		require.NotEqual(t, first, second)
		firstID, _, _ := strings.Cut(first, ".")
		_, err := b.db.ConsoleSessionGetByID(ctx, firstID)
		require.ErrorIs(t, err, store.ErrNotFound, "signing in again ends the old session")

		status, _, _ = c.post("/logout", nil)
		require.Equal(t, http.StatusSeeOther, status)
		secondID, _, _ := strings.Cut(second, ".")
		_, err = b.db.ConsoleSessionGetByID(ctx, secondID)
		require.ErrorIs(t, err, store.ErrNotFound)
		status, _ = c.get("/workflows")
		require.Equal(t, http.StatusSeeOther, status)
	})

	t.Run("NextStaysOnSite", func(t *testing.T) {
		t.Parallel()
		c := b.client(t)
		status, _, resp := c.do(http.MethodGet, "/memos?q=x", nil, nil)
		require.Equal(t, http.StatusSeeOther, status)
		require.Equal(t, "/login?next=%2Fmemos%3Fq%3Dx", resp.Header.Get("Location"))
		_, page, _ := c.do(http.MethodGet, "/login", nil, nil)
		tok := csrfField.FindStringSubmatch(page)[1]
		_, _, resp = c.do(http.MethodPost, "/login", url.Values{"csrf_token": {tok}, "username": {"viewer"},
			"password": {testPassword}, "next": {"//evil.example/x"}}, nil)
		require.Equal(t, "/", resp.Header.Get("Location"))
	})

	t.Run("LoginFormNeedsItsToken", func(t *testing.T) {
		t.Parallel()
		c := b.client(t)
		status, _, _ := c.do(http.MethodPost, "/login", url.Values{"username": {"viewer"}, "password": {testPassword}}, nil)
		require.Equal(t, http.StatusForbidden, status)
	})
}

func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	for range 5 {
		status, _ := c.signIn("steward", "wrong")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, page, resp := c.signInPage("steward", testPassword)
	require.Equal(t, http.StatusTooManyRequests, status, "even the right password waits once throttled")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Contains(t, page, "Try again in 15 minutes.", "the wait in words")
	status, _ = c.signIn("viewer", testPassword)
	require.Equal(t, http.StatusSeeOther, status, "the throttle is per username and address")
}

func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admin := b.signedIn(t, "admin")

	userCount := func() int {
		n, err := b.db.UserCount(ctx)
		require.NoError(t, err)
		return n
	}
	before := userCount()
	form := func(name string) url.Values {
		return url.Values{"csrf_token": {admin.csrf}, "username": {name}, "password": {"long enough pw"}, "role": {"viewer"}}
	}
	for name, h := range map[string]map[string]string{
		"ForeignOrigin":  {"Origin": "https://evil.example", "Sec-Fetch-Site": ""},
		"CrossSiteFetch": {"Sec-Fetch-Site": "cross-site", "Origin": ""},
		"NullOrigin":     {"Origin": "null"},
	} {
		status, body, _ := admin.do(http.MethodPost, "/users", form("mallory"+strings.ToLower(name)), h)
		require.Equal(t, http.StatusForbidden, status, name)
		require.Contains(t, body, "cross-site request refused", name)
	}
	status, _, _ := admin.do(http.MethodPost, "/users", url.Values{"username": {"eve"}, "password": {"long enough pw"}, "role": {"viewer"}}, nil)
	require.Equal(t, http.StatusForbidden, status, "no token")
	bad := form("eve")
	bad.Set("csrf_token", "forged")
	status, _, _ = admin.do(http.MethodPost, "/users", bad, nil)
	require.Equal(t, http.StatusForbidden, status, "wrong token")
	require.Equal(t, before, userCount(), "refused requests changed nothing")

	status, _, _ = admin.do(http.MethodPost, "/users", form("trudy"), nil)
	require.Equal(t, http.StatusSeeOther, status, "the same request from the console itself works")
	require.Equal(t, before+1, userCount())

	t.Run("CookieAuthenticatedAPI", func(t *testing.T) {
		memo := `{"title":"From the console","body":"hello"}`
		apiPost := func(h map[string]string) int {
			req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/api/memos", strings.NewReader(memo))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := admin.http.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Equal(t, http.StatusForbidden, apiPost(nil), "a cookie without the token")
		require.Equal(t, http.StatusForbidden, apiPost(map[string]string{"X-CSRF-Token": admin.csrf, "Origin": "https://evil.example"}))
		require.Equal(t, http.StatusForbidden, apiPost(map[string]string{"X-CSRF-Token": admin.csrf, "Sec-Fetch-Site": "cross-site"}))
		found, err := b.db.MemoSearch(ctx, &store.MemoSearchParams{Query: "From the console"})
		require.NoError(t, err)
		require.Empty(t, found)
		require.Equal(t, http.StatusCreated, apiPost(map[string]string{"X-CSRF-Token": admin.csrf, "Origin": b.srv.URL}))
	})
}

func TestMemoRendersInert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := b.lib.Create(context.Background(), library.CreateParams{Title: "Hostile <b>memo</b>", Body: strings.Join([]string{
		"# Report",
		"",
		"<script>alert('block')</script>",
		"",
		"Inline <img src=x onerror=alert(1)> and <script>alert('inline')</script> here.",
		"",
		"[click me](javascript:alert(1)) [also](JaVaScRiPt:alert(2)) [data](data:text/html;base64,PHNjcmlwdD4=)",
		"",
		"<a href=\"javascript:alert(3)\">raw link</a>",
		"",
		"<javascript:alert(4)> [ref][r] [ent](&#106;avascript:alert(5)) ![img](javascript:alert(6))",
		"",
		"[r]: javascript:alert(7)",
		"",
		"[fine](https://example.com/ok) and **bold**",
	}, "\n")})
	require.NoError(t, err)
	c := b.signedIn(t, "viewer")
	status, page := c.get("/memos/" + m.ID)
	require.Equal(t, http.StatusOK, status)

	scripts := regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(page, -1)
	require.Len(t, scripts, 2, "only the console's own scripts: %v", scripts)
	for _, s := range scripts {
		require.Regexp(t, `^<script src="/static/[a-z0-9.-]+\.js" defer>$`, s)
	}
	require.NotRegexp(t, `(?i)(href|src)="\s*(javascript|data|vbscript|&#)`, page)
	require.NotContains(t, page, "alert(5)\"", "entity-encoded schemes are caught too")
	require.NotRegexp(t, `(?i)<img[^>]*onerror`, page)
	require.NotContains(t, page, "<b>memo</b>")
	require.Contains(t, page, "&lt;script&gt;alert(")
	require.Contains(t, page, "&lt;img src=x onerror=alert(1)&gt;", "raw HTML is shown as text, not dropped")
	require.Contains(t, page, `<a href="https://example.com/ok">fine</a>`)
	require.Contains(t, page, "<strong>bold</strong>")
}

func TestStatusCodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	viewer := b.signedIn(t, "viewer")
	steward := b.signedIn(t, "steward")
	admin := b.signedIn(t, "admin")
	anon := b.client(t)

	for _, tc := range []struct {
		name   string
		c      *client
		method string
		path   string
		want   int
	}{
		{"UnknownMemo", viewer, http.MethodGet, "/memos/mem_missing", http.StatusNotFound},
		{"UnknownWorkflow", viewer, http.MethodGet, "/workflows/nope", http.StatusNotFound},
		{"UnknownPage", viewer, http.MethodGet, "/no/such/page", http.StatusNotFound},
		{"UsersNeedAdmin", steward, http.MethodGet, "/users", http.StatusForbidden},
		{"UsersForViewerToo", viewer, http.MethodGet, "/users", http.StatusForbidden},
		{"UsersForAdmin", admin, http.MethodGet, "/users", http.StatusOK},
		{"AddUserNeedsAdmin", steward, http.MethodPost, "/users", http.StatusForbidden},
		{"PauseNeedsAdmin", steward, http.MethodPost, "/workflows/draft-memo/status", http.StatusForbidden},
		{"WorkflowPage", viewer, http.MethodGet, "/workflows/draft-memo", http.StatusOK},
		{"Memos", viewer, http.MethodGet, "/memos?q=style", http.StatusOK},
		{"SignedOutRedirects", anon, http.MethodGet, "/workflows", http.StatusSeeOther},
		{"SignedOutPost", anon, http.MethodPost, "/users", http.StatusUnauthorized},
		{"UnknownAsset", anon, http.MethodGet, "/static/style.css", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var status int
			if tc.method == http.MethodGet {
				status, _ = tc.c.get(tc.path)
			} else {
				status, _, _ = tc.c.post(tc.path, url.Values{"status": {"paused"}})
			}
			require.Equal(t, tc.want, status)
		})
	}
}

func TestSecurityHeadersAndAssets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	_, page, resp := c.do(http.MethodGet, "/login", nil, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.NotEmpty(t, resp.Header.Get("Referrer-Policy"))
	require.NotRegexp(t, `<script>|<script [^s]`, page, "no inline script")

	css := regexp.MustCompile(`href="(/static/style\.[0-9a-f]+\.css)"`).FindStringSubmatch(page)
	require.NotNil(t, css)
	status, _, resp := c.do(http.MethodGet, css[1], nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, resp.Header.Get("Cache-Control"), "immutable")
	require.Contains(t, resp.Header.Get("Content-Type"), "text/css")
}

func TestAdminManagesWorkflowsAndUsers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admin := b.signedIn(t, "admin")

	status, _, _ := admin.post("/workflows/draft-memo/status", url.Values{"status": {"paused"}})
	require.Equal(t, http.StatusSeeOther, status)
	wf, err := b.db.WorkflowGetByCommand(ctx, "/draft-memo")
	require.NoError(t, err)
	require.Equal(t, "paused", wf.Status)
	_, page := admin.get("/workflows/draft-memo")
	require.Contains(t, page, "is now paused")
	require.Contains(t, page, ">Resume<")
	status, _, _ = admin.post("/workflows/draft-memo/status", url.Values{"status": {"deleted"}})
	require.Equal(t, http.StatusBadRequest, status)

	status, page, _ = admin.postFollow("/users", url.Values{"username": {"steward"}, "password": {"long enough pw"}, "role": {"viewer"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "already taken")
	require.Contains(t, page, `name="username" value="steward"`, "what was typed comes back")
	status, page, _ = admin.postFollow("/users", url.Values{"username": {"short"}, "password": {"pw"}, "role": {"viewer"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "at least 8 characters")

	viewer := b.users["viewer"]
	status, _, _ = admin.post("/users/"+viewer.ID+"/role", url.Values{"role": {"steward"}})
	require.Equal(t, http.StatusSeeOther, status)
	u, err := b.db.UserGetByID(ctx, viewer.ID)
	require.NoError(t, err)
	require.Equal(t, "steward", u.Role)
	status, page, _ = admin.postFollow("/users/"+b.users["admin"].ID+"/role", url.Values{"role": {"viewer"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "cannot change your own role", "an admin cannot demote themself")
	u, err = b.db.UserGetByID(ctx, b.users["admin"].ID)
	require.NoError(t, err)
	require.Equal(t, store.RoleAdmin, u.Role)
}

func TestWorkflowCompileErrorsBesideSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := "# Broken\n\n## Trigger\n- **Command** `/broken`\n- **Status** `live`\n\n## Load Contract\n- **Gate** No such memo\n\n## Steps\n1. **Output** Send it.\n\n## Policy\n- **Destination** `worktree`\n"
	m, err := b.lib.Create(context.Background(), library.CreateParams{Title: "Broken", Body: body, MemoType: store.MemoTypeWorkflow})
	require.NoError(t, err)
	c := b.signedIn(t, "viewer")
	_, list := c.get("/workflows")
	require.Contains(t, list, "/broken")
	// By command, and by memo id: the link Slack posts for a workflow that
	// does not compile.
	for _, path := range []string{"/workflows/broken", "/workflows/" + m.ID} {
		status, page := c.get(path)
		require.Equal(t, http.StatusOK, status, path)
		require.Contains(t, page, `id="compile-errors"`)
		require.Regexp(t, `<div class="ln bad" id="L8">`, page, "the Gate line is marked")
		require.Regexp(t, `<div class="ln bad" id="L14">`, page, "the Destination line is marked")
		require.NotContains(t, page, "Run now", "a viewer gets no run-now form")
	}
	_, page := b.signedIn(t, "steward").get("/workflows/broken")
	require.NotContains(t, page, `id="run-now"`, "nor a steward, for a workflow that takes no items")
}

func TestSecureCookiesUnderHTTPS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	secure := web.New(web.Deps{Store: b.db, Library: b.lib, Sessions: b.sess, Engine: b.eng, BaseURL: "https://holdfast.example"})
	srv := httptest.NewServer(secure.Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/login")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))
	var login *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "holdfast_login" {
			login = ck
		}
	}
	require.NotNil(t, login)
	require.True(t, login.Secure, "cookies are Secure when the console is served over https")
	require.True(t, login.HttpOnly)
}

func TestExpiredSignInRedirectsLiveParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	status, _, resp := c.do(http.MethodGet, "/holds/live", nil, map[string]string{"HX-Request": "true"})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "/login", resp.Header.Get("HX-Redirect"), "a poll after sign-out sends the page to the sign-in form")
}

// A form sent after the sign-in ended changes nothing and answers with the
// sign-in form, which returns to the page the form was on.
func TestExpiredSignInFormPost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	_, hold := b.heldRun(t, "slack:U9", "after sign-out")
	status, page, resp := c.do(http.MethodPost, "/holds/"+hold.ID+"/decision", url.Values{"decision": {"approve"}},
		map[string]string{"Referer": b.srv.URL + "/holds/" + hold.ID})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, page, "Your sign-in has ended")
	require.Contains(t, page, `id="username"`, "the sign-in form itself")
	require.Contains(t, page, `value="/holds/`+hold.ID+`"`, "which returns to the hold")
	h, err := b.db.HoldGetByID(context.Background(), hold.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status, "nothing changed")

	_, page, _ = c.do(http.MethodPost, "/sessions", url.Values{"title": {"x"}}, map[string]string{"Referer": "https://evil.example/sessions"})
	require.Contains(t, page, `name="next" value="/"`, "another site's page is not a place to return to")
}
