package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

const (
	// sessionCookie holds "<id>.<secret>".
	sessionCookie = "holdfast_session"
	// loginCookie is the sign-in form's double-submit CSRF token: there is
	// no session yet to keep a token in.
	loginCookie = "holdfast_login"
)

type ctxKey struct{}

// current is the signed-in browser of a request.
type current struct {
	session *store.ConsoleSession
	id      *auth.Identity
}

func from(ctx context.Context) *current {
	cur, _ := ctx.Value(ctxKey{}).(*current)
	return cur
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func identityOf(u *store.User) *auth.Identity {
	return &auth.Identity{UserID: u.ID, Username: u.Username, Role: u.Role, SlackUserID: u.SlackUserID, Cookie: true}
}

// lookup authenticates the session cookie. The secret is compared by hash in
// constant time; any failure is simply "not signed in".
func (c *Console) lookup(r *http.Request) *current {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	id, secret, ok := strings.Cut(ck.Value, ".")
	if !ok || id == "" || secret == "" {
		return nil
	}
	s, err := c.Store.ConsoleSessionGetByID(r.Context(), id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			c.Log.ErrorContext(r.Context(), "console session lookup", slog.Any("error", err))
		}
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(s.SecretHash)) != 1 {
		return nil
	}
	if s.User.Disabled {
		// Disabling deletes the user's sessions too; this covers a sign-in
		// that raced the disabling.
		return nil
	}
	return &current{session: s, id: identityOf(s.User)}
}

// Cookie authenticates a console cookie for the JSON API (api.Deps.Cookie).
func (c *Console) Cookie(r *http.Request) *auth.Identity {
	if cur := c.lookup(r); cur != nil {
		return cur.id
	}
	return nil
}

// CSRF checks a cookie-authenticated API request exactly as console forms
// are checked (api.Deps.CSRF); the token travels in X-CSRF-Token.
func (c *Console) CSRF(r *http.Request) error {
	cur := c.lookup(r)
	if cur == nil {
		return errors.New("not signed in")
	}
	return c.checkCSRF(r, cur.session.CSRFToken)
}

func (c *Console) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := c.lookup(r)
		if cur == nil {
			if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			// A live part polling after the sign-in expired sends the whole
			// page to the sign-in form instead of failing every second.
			if r.Header.Get("HX-Request") != "" {
				w.Header().Set("HX-Redirect", "/login")
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		ctx := auth.With(context.WithValue(r.Context(), ctxKey{}, cur), cur.id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// atLeast is the API's role order, so both surfaces rank roles alike.
var atLeast = api.AtLeast

// requireRole answers 403 to anyone below min. Handlers also hide what a
// role cannot use; this is the enforcement, that is only courtesy.
func (c *Console) requireRole(min string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !atLeast(auth.From(r.Context()), min) {
				c.errorPage(w, r, http.StatusForbidden, "Not allowed", "This needs the "+min+" role.")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: c.secureCookies(r), SameSite: http.SameSiteLaxMode})
}

// safeNext keeps post-sign-in redirects on this site: a path, never a
// scheme-relative or absolute URL.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, username, errMsg, next string) {
	// Reuse the browser's token: another tab or a stray request for the
	// form must not invalidate a form already on screen.
	token := ""
	if ck, err := r.Cookie(loginCookie); err == nil && len(ck.Value) == 32 {
		token = ck.Value
	} else {
		token = randomToken(24)
	}
	c.setCookie(w, r, loginCookie, token, 3600)
	c.render(w, r, status, templates.LoginPage(templates.LoginView{
		Page: templates.Page{Title: "Sign in", CSRF: token}, Username: username, Error: errMsg, Next: next}))
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	if c.lookup(r) != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.renderLogin(w, r, http.StatusOK, "", "", r.URL.Query().Get("next"))
}

// dummyHash is compared against when the username is unknown, so a wrong
// username costs the same bcrypt time as a wrong password.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("holdfast-dummy-password"), bcrypt.DefaultCost)

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "The sign-in form could not be read.")
		return
	}
	username := strings.TrimSpace(r.PostForm.Get("username"))
	next := r.PostForm.Get("next")
	ck, err := r.Cookie(loginCookie)
	if err != nil || c.checkCSRF(r, ck.Value) != nil {
		c.renderLogin(w, r, http.StatusForbidden, username, "Your sign-in form expired or came from another site. Please try again.", next)
		return
	}
	key := strings.ToLower(username) + "|" + clientIP(r)
	if wait := c.throttle.blocked(key); wait > 0 {
		w.Header().Set("Retry-After", retryAfter(wait))
		c.renderLogin(w, r, http.StatusTooManyRequests, username,
			"Too many failed sign-ins. Try again in "+wait.Round(time.Minute).String()+".", next)
		return
	}
	u, err := c.Store.UserGetByUsername(r.Context(), username)
	hash := dummyHash
	if err == nil {
		hash = []byte(u.PasswordHash)
	} else if !errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, err)
		return
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(r.PostForm.Get("password"))) != nil || u == nil {
		c.throttle.fail(key)
		c.Log.InfoContext(r.Context(), "console sign-in refused", slog.String("username", username), slog.String("ip", clientIP(r)))
		c.renderLogin(w, r, http.StatusUnauthorized, username, "Wrong username or password.", next)
		return
	}
	c.throttle.reset(key)
	if u.Disabled {
		// The right password, so saying why is no leak; the account stays shut.
		c.Log.InfoContext(r.Context(), "console sign-in of a disabled user", slog.String("username", u.Username))
		c.renderLogin(w, r, http.StatusForbidden, username, "This account is disabled. Ask an admin to enable it.", next)
		return
	}
	// Rotate: a sign-in always mints a new session and ends the old one, so
	// a planted session id is worthless after the victim signs in.
	if old := c.lookup(r); old != nil {
		if err := c.Store.ConsoleSessionDelete(r.Context(), old.session.ID); err != nil {
			c.fail(w, r, err)
			return
		}
	}
	if _, err := c.Store.ConsoleSessionDeleteExpired(r.Context(), c.Now()); err != nil {
		c.Log.WarnContext(r.Context(), "pruning expired console sessions", slog.Any("error", err))
	}
	id, secret := randomToken(16), randomToken(32)
	_, err = c.Store.ConsoleSessionCreate(r.Context(), &store.ConsoleSession{ID: id, SecretHash: hashSecret(secret), UserID: u.ID,
		CSRFToken: randomToken(32), UserAgent: truncate(r.UserAgent(), 200), IP: clientIP(r), ExpiresAt: c.Now().Add(c.SessionTTL)})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.setCookie(w, r, sessionCookie, id+"."+secret, int(c.SessionTTL/time.Second))
	c.setCookie(w, r, loginCookie, "", -1)
	c.Log.InfoContext(r.Context(), "console sign-in", slog.String("username", u.Username), slog.String("user_id", u.ID))
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if err := c.Store.ConsoleSessionDelete(r.Context(), from(r.Context()).session.ID); err != nil {
		c.fail(w, r, err)
		return
	}
	c.setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(d.Seconds()) + 1)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// throttle counts failed sign-ins per username+IP in a fixed window. It is
// in memory: a restart forgives, which is acceptable for a per-process
// brake on password guessing (a shared limiter is for the multi-replica
// deployment).
type throttle struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	now    func() time.Time
	m      map[string]*attempts
}

type attempts struct {
	n     int
	first time.Time
}

func newThrottle(max int, window time.Duration, now func() time.Time) *throttle {
	return &throttle{max: max, window: window, now: now, m: map[string]*attempts{}}
}

// blocked answers how long key must wait, or 0.
func (t *throttle) blocked(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.m[key]
	if a == nil {
		return 0
	}
	left := a.first.Add(t.window).Sub(t.now())
	if left <= 0 {
		delete(t.m, key)
		return 0
	}
	if a.n < t.max {
		return 0
	}
	return left
}

func (t *throttle) fail(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.m) > 10000 {
		for k, a := range t.m {
			if now.Sub(a.first) > t.window {
				delete(t.m, k)
			}
		}
	}
	a := t.m[key]
	if a == nil || now.Sub(a.first) > t.window {
		a = &attempts{first: now}
		t.m[key] = a
	}
	a.n++
}

func (t *throttle) reset(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}
