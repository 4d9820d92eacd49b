package web_test

import (
	"context"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/store"
)

// TestSignInNextIsLocalOnly: next is followed only when it is a local path
// (one leading slash, no //, no backslash, no control character, checked
// after decoding), else "/", on POST /login and on GET /login alike.
func TestSignInNextIsLocalOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name, next, want string
	}{
		{"LocalPath", "/memos?q=x", "/memos?q=x"},
		{"Empty", "", "/"},
		{"TabThenSlash", "/\t/evil.example/x", "/"},
		{"NewlineThenSlash", "/\n/evil.example/x", "/"},
		{"CarriageReturn", "/\r/evil.example/x", "/"},
		{"NUL", "/\x00/evil.example", "/"},
		{"DoubleSlash", "//evil.example/x", "/"},
		{"DoubleSlashInside", "/a//evil.example", "/"},
		{"Backslash", `/\evil.example`, "/"},
		{"BackslashInside", `/a\b`, "/"},
		{"Absolute", "https://evil.example/", "/"},
		{"SchemeRelativeEncoded", "/%2F%2Fevil.example", "/"},
		{"EncodedTab", "/%09/evil.example", "/"},
		{"EncodedBackslash", "/%5Cevil.example", "/"},
		{"Relative", "evil.example", "/"},
		{"InvalidUTF8", "/\xff", "/"},
		{"DEL", "/\x7f/evil.example", "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := b.client(t)
			_, page, _ := c.do(http.MethodGet, "/login", nil, nil)
			tok := csrfField.FindStringSubmatch(page)[1]
			status, _, resp := c.do(http.MethodPost, "/login", url.Values{"csrf_token": {tok}, "username": {"viewer"},
				"password": {testPassword}, "next": {tc.next}}, nil)
			if strings.ContainsAny(tc.next, "\x00\xff") {
				// Text that is not UTF-8 or holds NUL is refused outright (400).
				require.Equal(t, http.StatusBadRequest, status)
			} else {
				require.Equal(t, http.StatusSeeOther, status)
				require.Equal(t, tc.want, resp.Header.Get("Location"), "POST /login")
			}

			signedIn := b.signedIn(t, "viewer")
			status, _, resp = signedIn.do(http.MethodGet, "/login?next="+url.QueryEscape(tc.next), nil, nil)
			if strings.ContainsAny(tc.next, "\x00\xff") {
				require.Equal(t, http.StatusBadRequest, status, "in a query string as in a form")
				return
			}
			require.Equal(t, http.StatusSeeOther, status)
			require.Equal(t, tc.want, resp.Header.Get("Location"), "GET /login when signed in")
		})
	}
}

// throttleBundle is a console whose password comparisons are counted and
// whose clients can come from different loopback addresses.
type throttleBundle struct {
	*bundle
	hashes atomic.Int64
	srv    string
}

func setupThrottle(t *testing.T) *throttleBundle {
	t.Helper()
	b := setup(t)
	tb := &throttleBundle{bundle: b}
	console := web.New(web.Deps{Store: b.db, Library: b.lib, Sessions: b.sess, Engine: b.eng,
		CompareHash: func(hash, password []byte) error {
			tb.hashes.Add(1)
			return bcrypt.CompareHashAndPassword(hash, password)
		}})
	srv := newServer(t, server.Handler(server.Deps{Store: b.db, Console: console.Handler()}))
	tb.srv = srv
	return tb
}

// from is a browser at 127.0.0.<n> (Linux routes all of 127/8 to lo).
func (tb *throttleBundle) from(t *testing.T, n int) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n))}}
	return &client{t: t, b: tb.bundle, base: tb.srv, http: &http.Client{Jar: jar,
		Transport:     &http.Transport{DialContext: dialer.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// TestSignInThrottles covers the three throttles of SPEC §7 (each 429 with
// Retry-After within a 15-minute window) and what an attempt costs: a
// throttled one no password hash, an unknown username exactly one.
func TestSignInThrottles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FivePerUsernameAndAddress", func(t *testing.T) {
		t.Parallel()
		tb := setupThrottle(t)
		c := tb.from(t, 1)
		for range 5 {
			status, _ := c.signIn("steward", "wrong")
			require.Equal(t, http.StatusUnauthorized, status)
		}
		before := tb.hashes.Load()
		status, resp := c.signIn("steward", testPassword)
		require.Equal(t, http.StatusTooManyRequests, status, "even the right password waits once throttled")
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, wait > 0 && wait <= 15*60+1, "Retry-After %d is within the window", wait)
		require.Equal(t, before, tb.hashes.Load(), "a throttled attempt costs no password hash")

		status, _ = tb.from(t, 2).signIn("steward", testPassword)
		require.Equal(t, http.StatusSeeOther, status, "the same name from another address signs in")
		status, _ = c.signIn("viewer", testPassword)
		require.Equal(t, http.StatusSeeOther, status, "another name from the same address signs in")
	})

	t.Run("TwentyPerUsernameFromAnyAddress", func(t *testing.T) {
		t.Parallel()
		tb := setupThrottle(t)
		for i := range 20 {
			status, _ := tb.from(t, 10+i/4).signIn("steward", "wrong") // four guesses from each of five addresses
			require.Equal(t, http.StatusUnauthorized, status, "guess %d", i)
		}
		before := tb.hashes.Load()
		status, resp := tb.from(t, 40).signIn("steward", testPassword)
		require.Equal(t, http.StatusTooManyRequests, status, "a fresh address is throttled for that name too")
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		require.Equal(t, before, tb.hashes.Load())
		status, _ = tb.from(t, 40).signIn("viewer", testPassword)
		require.Equal(t, http.StatusSeeOther, status)
	})

	t.Run("TwentyUnknownUsernamesPerAddress", func(t *testing.T) {
		t.Parallel()
		tb := setupThrottle(t)
		c := tb.from(t, 50)
		for i := range 20 {
			before := tb.hashes.Load()
			status, _ := c.signIn("nobody"+strconv.Itoa(i), "guess")
			require.Equal(t, http.StatusUnauthorized, status, "unknown usernames get the same answer as wrong passwords")
			require.Equal(t, before+1, tb.hashes.Load(), "an unknown username costs exactly one hash, as a known one does")
		}
		before := tb.hashes.Load()
		status, resp := c.signIn("nobody-else", "guess")
		require.Equal(t, http.StatusTooManyRequests, status)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		status, _ = c.signIn("viewer", testPassword)
		require.Equal(t, http.StatusTooManyRequests, status, "the address is throttled for every name, so the refusal tells no names apart")
		require.Equal(t, before, tb.hashes.Load())
		status, _ = tb.from(t, 51).signIn("viewer", testPassword)
		require.Equal(t, http.StatusSeeOther, status, "other addresses are not")
	})

	t.Run("SuccessForgetsTheAddressCount", func(t *testing.T) {
		t.Parallel()
		tb := setupThrottle(t)
		c := tb.from(t, 60)
		for range 4 {
			status, _ := c.signIn("steward", "wrong")
			require.Equal(t, http.StatusUnauthorized, status)
		}
		status, _ := c.signIn("steward", testPassword)
		require.Equal(t, http.StatusSeeOther, status)
		for range 4 {
			status, _ := tb.from(t, 60).signIn("steward", "wrong")
			require.Equal(t, http.StatusUnauthorized, status, "the count for this address started again")
		}
		fs, err := tb.db.SignInFailureList(ctx, &store.SignInFailureListParams{Keys: []string{"user:steward"}})
		require.NoError(t, err)
		require.Len(t, fs, 1)
		require.Equal(t, 8, fs[0].Failures, "the per-username count is kept")
	})
}
