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
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			// A form sent after the sign-in ended: nothing is done, and the
			// answer is the sign-in form, leading back to the form's page.
			c.renderLogin(w, r, http.StatusUnauthorized, "", "Your sign-in has ended, so that was not sent. Sign in, then send it again.",
				safeNext(refererPath(r)))
			return
		}
		ctx := auth.With(context.WithValue(r.Context(), ctxKey{}, cur), cur.id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// requireRole answers 403 to anyone below min. Handlers also hide what a
// role cannot use; this is the enforcement, that is only courtesy.
func (c *Console) requireRole(min string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !auth.From(r.Context()).AtLeast(min) {
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

// safeNext is where a sign-in sends the browser: next when it is a local
// path, else "/" (SPEC §7). Browsers drop tabs and newlines from URLs and
// read a backslash as a slash, so "/\t/evil.example" or "/\\evil.example"
// would leave the site; next is checked as received (the form and the query
// are decoded once already) and once more percent-decoded.
func safeNext(next string) string {
	if !localPath(next) {
		return "/"
	}
	if dec, err := url.PathUnescape(next); err != nil || !localPath(dec) {
		return "/"
	}
	return next
}

// refererPath is the path and query of the page a request came from when
// that page is this site's, else "".
func refererPath(r *http.Request) string {
	u, err := url.Parse(r.Referer())
	if err != nil || u.Host != r.Host {
		return ""
	}
	return u.RequestURI()
}

// localPath: one leading slash, no "//", no backslash, no control
// character, valid UTF-8.
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsRune(p, '\\') || !utf8.ValidString(p) {
		return false
	}
	return !strings.ContainsFunc(p, unicode.IsControl)
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

// dummyHash is what an unknown username's password is compared against:
// a bcrypt hash at bcrypt.DefaultCost, the cost every password is stored
// with (the console and the CLI hash with it), of a password nobody has. An
// unknown username so costs exactly one comparison, as a known one does, and
// the answer's timing does not tell which names exist; it costs nothing
// more (no hash is generated per request, nor at start).
const dummyHash = "$2a$10$8mWWV20WUzEDmDGE1vk58OH4Eyk7e/uTW4ysHPtgUqywa3nD08lFK"

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Sign-in throttles (SPEC §7), each a fixed window of throttleWindow kept in
// the store so every replica shares it (SPEC §9).
const (
	throttleWindow = 15 * time.Minute
	// maxPerUserAddr failures per username from one address;
	maxPerUserAddr = 5
	// maxPerUser failures per username from any address;
	maxPerUser = 20
	// maxUnknownPerAddr failures for unknown usernames from one address.
	maxUnknownPerAddr = 20
)

// throttleKeys are the store keys of one attempt: per username and
// address, per username, and per address for unknown usernames.
type throttleKeys struct{ userAddr, user, unknownAddr string }

func keysFor(username, addr string) throttleKeys {
	u := strings.ToLower(username)
	return throttleKeys{userAddr: "user_addr:" + u + "|" + addr, user: "user:" + u, unknownAddr: "unknown_addr:" + addr}
}

// throttled answers how long the attempt must wait, or 0. Every count is
// checked before the username is looked up, so a throttled attempt costs no
// password hash and no user lookup. An address past its unknown-username
// limit is throttled for every username: were known names let through, the
// refusal itself would tell which names exist.
func (c *Console) throttled(ctx context.Context, k throttleKeys) (time.Duration, error) {
	now := c.Now()
	fs, err := c.Store.SignInFailureList(ctx, &store.SignInFailureListParams{Keys: []string{k.userAddr, k.user, k.unknownAddr},
		Since: now.Add(-throttleWindow)})
	if err != nil {
		return 0, err
	}
	limit := map[string]int{k.userAddr: maxPerUserAddr, k.user: maxPerUser, k.unknownAddr: maxUnknownPerAddr}
	var wait time.Duration
	for _, f := range fs {
		if f.Failures >= limit[f.Key] {
			wait = max(wait, f.WindowStart.Add(throttleWindow).Sub(now))
		}
	}
	return wait, nil
}

// failed counts a failed sign-in. Every failure counts against the
// username (known or not, so the throttles do not tell names apart); one
// for a name that does not exist also counts against the address.
func (c *Console) failed(ctx context.Context, k throttleKeys, unknown bool) error {
	keys := []string{k.userAddr, k.user}
	if unknown {
		keys = append(keys, k.unknownAddr)
	}
	now := c.Now()
	return c.Store.SignInFailureAddMany(ctx, &store.SignInFailureAddManyParams{Keys: keys, Now: now, Since: now.Add(-throttleWindow)})
}

// login signs a browser in. The form was read and size-checked (413) by
// readInput before anything else, then the CSRF token, then the throttles
// (429 with Retry-After, no hash), then the password.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	username := strings.TrimSpace(r.PostForm.Get("username"))
	next := r.PostForm.Get("next")
	ck, err := r.Cookie(loginCookie)
	if err != nil || c.checkCSRF(r, ck.Value) != nil {
		c.renderLogin(w, r, http.StatusForbidden, username, "Your sign-in form expired or came from another site. Please try again.", next)
		return
	}
	if err := store.CheckName("username", username); err != nil {
		c.renderLogin(w, r, http.StatusBadRequest, "", "A username is at most 500 characters.", next)
		return
	}
	keys := keysFor(username, clientIP(r))
	wait, err := c.throttled(r.Context(), keys)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if wait > 0 {
		w.Header().Set("Retry-After", retryAfter(wait))
		c.renderLogin(w, r, http.StatusTooManyRequests, username,
			"Too many failed sign-ins. Try again in "+plural(int64(math.Ceil(wait.Minutes())), "minute")+".", next)
		return
	}
	u, err := c.Store.UserGetByUsername(r.Context(), username)
	hash := []byte(dummyHash)
	if err == nil {
		hash = []byte(u.PasswordHash)
	} else if !errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, err)
		return
	}
	if c.CompareHash(hash, []byte(r.PostForm.Get("password"))) != nil || u == nil {
		if err := c.failed(r.Context(), keys, u == nil); err != nil {
			c.fail(w, r, err)
			return
		}
		c.Log.InfoContext(r.Context(), "console sign-in refused", slog.String("username", username), slog.String("ip", clientIP(r)))
		c.renderLogin(w, r, http.StatusUnauthorized, username, "Wrong username or password.", next)
		return
	}
	if u.Disabled {
		// The right password, so saying why is no leak; the account stays shut.
		c.Log.InfoContext(r.Context(), "console sign-in of a disabled user", slog.String("username", u.Username))
		c.renderLogin(w, r, http.StatusForbidden, username, "This account is disabled. Ask an admin to enable it.", next)
		return
	}
	// A success forgets this address's failures for the name; the
	// per-username count stays, or guesses spread over many addresses
	// would start afresh whenever the owner signs in.
	if err := c.Store.SignInFailureDeleteMany(r.Context(), []string{keys.userAddr}); err != nil {
		c.fail(w, r, err)
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
