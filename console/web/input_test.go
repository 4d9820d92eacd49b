package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// TestFormInput: the console reads every form once, before sign-in, CSRF
// and the handler (SPEC §7): past 2 MiB is 413 before CSRF is looked at;
// text that is not UTF-8 or holds NUL is 400; nothing is stored either way.
func TestFormInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := b.signedIn(t, "steward")
	count := func() int {
		page, err := b.sess.List(ctx, sessions.ListParams{Origins: []string{store.OriginUser}, Limit: 200})
		require.NoError(t, err)
		return len(page.Sessions)
	}
	before := count()
	big := strings.Repeat("x", store.MaxRequestBytes)
	for _, tc := range []struct {
		name string
		form url.Values
		csrf bool
		want int
	}{
		{"OversizeWithoutToken", url.Values{"title": {big}}, false, http.StatusRequestEntityTooLarge},
		{"OversizeWithToken", url.Values{"title": {big}}, true, http.StatusRequestEntityTooLarge},
		{"NUL", url.Values{"title": {"a\x00b"}}, true, http.StatusBadRequest},
		{"InvalidUTF8", url.Values{"title": {"a\xffb"}}, true, http.StatusBadRequest},
		{"NULInAFieldName", url.Values{"ti\x00tle": {"x"}}, true, http.StatusBadRequest},
		{"NoToken", url.Values{"title": {"fine"}}, false, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{}
			for k, v := range tc.form {
				form[k] = v
			}
			if tc.csrf {
				form.Set("csrf_token", c.csrf)
			}
			status, _, _ := c.do(http.MethodPost, "/sessions", form, nil)
			require.Equal(t, tc.want, status)
			require.Equal(t, before, count(), "a refused form stores nothing")
		})
	}
	status, _, _ := c.post("/sessions", url.Values{"title": {strings.Repeat("t", store.MaxNameChars+1)}})
	require.Equal(t, http.StatusSeeOther, status, "a title past the limit is refused with a message on the page")
	require.Equal(t, before, count())

	status, _, _ = c.do(http.MethodPost, "/login", url.Values{"username": {big}}, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "the sign-in form too, before its CSRF check")
	status, _ = c.get("/sessions?cursor=%%")
	require.Equal(t, http.StatusBadRequest, status, "a malformed query is never a silent first page")
	for _, q := range []string{"/memos?q=%ff%fe", "/memos?q=a%00b", "/sessions?q=%ff"} {
		status, body := c.get(q)
		require.Equal(t, http.StatusBadRequest, status, "%s: a search that cannot be text is refused, never the unfiltered list", q)
		require.Contains(t, body, "query parameter")
		require.NotContains(t, body, "invalid: ", "a sentence, no error kind before it")
	}
}

// TestUnlistedMemosAreListedForStewardsOnly (SPEC §7).
func TestUnlistedMemosAreListedForStewardsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Hidden draft", Body: "an unlisted kestrel", Unlisted: true})
	require.NoError(t, err)
	listed, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Open note", Body: "a listed kestrel"})
	require.NoError(t, err)
	for _, tc := range []struct {
		role string
		sees bool
	}{
		{store.RoleViewer, false},
		{store.RoleSteward, true},
		{store.RoleAdmin, true},
	} {
		t.Run(tc.role, func(t *testing.T) {
			c := b.signedIn(t, tc.role)
			for _, path := range []string{"/memos", "/memos?q=kestrel"} {
				status, page := c.get(path)
				require.Equal(t, http.StatusOK, status)
				require.Contains(t, page, listed.Title)
				if tc.sees {
					require.Contains(t, page, "Hidden draft", path)
				} else {
					require.NotContains(t, page, "Hidden draft", path)
				}
			}
		})
	}
}
