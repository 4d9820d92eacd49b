package bridge_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// interact posts an interactivity payload as Slack does (a signed form
// with its JSON in the payload field) and answers the status and body.
func (tb *testBundle) interact(t *testing.T, payload map[string]any) (int, string) {
	t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	return tb.post(t, "/slack/interactions", "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(b)}}.Encode()))
}

// reviewClick is a click on a card's "Comment or edit…".
func (tb *testBundle) reviewClick(t *testing.T, user, holdID, channel, messageTS, threadTS string) (int, string) {
	t.Helper()
	return tb.interact(t, map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user}, "trigger_id": fmt.Sprintf("trig-%d", time.Now().UnixNano()),
		"channel":   map[string]any{"id": channel},
		"container": map[string]any{"type": "message", "channel_id": channel, "message_ts": messageTS, "thread_ts": threadTS},
		"message":   map[string]any{"ts": messageTS, "thread_ts": threadTS},
		"actions": []any{map[string]any{"type": "button", "action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID,
			"action_ts": fmt.Sprint(time.Now().UnixNano())}},
	})
}

// homeClick is a click on a hold's button in the App Home: no channel, a
// view container.
func (tb *testBundle) homeClick(t *testing.T, user, actionID, holdID string) int {
	t.Helper()
	status, _ := tb.interact(t, map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user}, "trigger_id": fmt.Sprintf("trig-%d", time.Now().UnixNano()),
		"container": map[string]any{"type": "view", "view_id": "VHOME"},
		"view":      map[string]any{"id": "VHOME", "type": "home"},
		"actions": []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "hold:" + holdID, "value": holdID,
			"action_ts": fmt.Sprint(time.Now().UnixNano())}},
	})
	return status
}

// review is what a steward submits in the review modal; a nil output is
// an output block left out (a long output's modal has none).
type review struct {
	decision, comment string
	output            *string
}

// submitReview posts the review modal's view_submission.
func (tb *testBundle) submitReview(t *testing.T, user, holdID string, r review) (int, string) {
	t.Helper()
	values := map[string]any{
		"decision": map[string]any{"decision": map[string]any{"type": "radio_buttons", "selected_option": map[string]any{"value": r.decision}}},
		"comment":  map[string]any{"comment": map[string]any{"type": "plain_text_input", "value": r.comment}},
	}
	if r.output != nil {
		values["output"] = map[string]any{"output": map[string]any{"type": "plain_text_input", "value": *r.output}}
	}
	return tb.interact(t, map[string]any{"type": "view_submission", "user": map[string]any{"id": user},
		"view": map[string]any{"id": fmt.Sprintf("V%d", time.Now().UnixNano()), "type": "modal", "callback_id": "hold_review",
			"private_metadata": holdID, "state": map[string]any{"values": values}}})
}

func ptr(s string) *string { return &s }

// ephemerals answers the ephemerals delivered to user.
func (tb *testBundle) ephemerals(user string) []fakeslack.Call {
	var out []fakeslack.Call
	for _, c := range tb.slack.Delivered("chat.postEphemeral") {
		if c.Form["user"] == user {
			out = append(out, c)
		}
	}
	return out
}

// waitEphemeral waits for an ephemeral to user matching fn (in thread
// inThread[0], when given).
func (tb *testBundle) waitEphemeral(t *testing.T, user string, fn func(text string) bool, inThread ...string) fakeslack.Call {
	t.Helper()
	var found fakeslack.Call
	tb.eventually(t, func() bool {
		for _, c := range tb.ephemerals(user) {
			if len(inThread) > 0 && c.Form["thread_ts"] != inThread[0] {
				continue
			}
			if fn(c.Form["text"]) {
				found = c
				return true
			}
		}
		return false
	}, 10*time.Second, "no matching ephemeral to %s; got %v", user, tb.ephemerals(user))
	return found
}

// viewOf decodes a view the bridge opened.
func viewOf(t *testing.T, v fakeslack.View) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal(v.View, &out))
	return out
}

// blockByID finds a view's block by block_id.
func blockByID(view map[string]any, id string) map[string]any {
	bs, _ := view["blocks"].([]any)
	for _, b := range bs {
		if m, ok := b.(map[string]any); ok && m["block_id"] == id {
			return m
		}
	}
	return nil
}

// homeHas waits until user's published App Home satisfies fn.
func (tb *testBundle) homeHas(t *testing.T, user string, fn func(home string) bool, msg string) string {
	t.Helper()
	var last string
	tb.eventually(t, func() bool {
		last = unescapeJSON(string(tb.slack.Home(user)))
		return last != "" && fn(last)
	}, 10*time.Second, "%s; the Home of %s: %s", msg, user, last)
	return last
}

func unescapeJSON(s string) string {
	return strings.NewReplacer(`\u0026`, "&", `\u003c`, "<", `\u003e`, ">").Replace(s)
}

// homeOpened is Slack's app_home_opened event for user's Home tab.
func homeOpened(user string) map[string]any {
	return map[string]any{"type": "app_home_opened", "user": user, "channel": "D" + user, "tab": "home",
		"event_ts": fmt.Sprint(time.Now().UnixNano())}
}

// console is a signed-in console browser.
type console struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

var (
	csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`)
)

// consoleSteward creates console steward username (linked to Slack user
// slackID when set) and signs them in.
func (tb *testBundle) consoleSteward(t *testing.T, username, slackID string) *console {
	t.Helper()
	const password = "correct horse battery"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	_, err = tb.store.UserCreate(tb.ctx, &store.User{Username: username, PasswordHash: string(hash), Role: store.RoleSteward, SlackUserID: slackID})
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &console{t: t, base: tb.srv.URL, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
	_, page := c.do(http.MethodGet, "/login", nil)
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "the sign-in form carries a CSRF token")
	status, _ := c.do(http.MethodPost, "/login", url.Values{"csrf_token": {m[1]}, "username": {username}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, status)
	c.do(http.MethodGet, "/holds", nil)
	require.NotEmpty(t, c.csrf)
	return c
}

func (c *console) do(method, path string, form url.Values) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", c.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	if m := csrfMeta.FindStringSubmatch(string(b)); m != nil {
		c.csrf = m[1]
	}
	return resp.StatusCode, string(b)
}

// decide submits the console's decision form for a hold.
func (c *console) decide(holdID, decision, comment string) int {
	c.t.Helper()
	status, _ := c.do(http.MethodPost, "/holds/"+holdID+"/decision", url.Values{"csrf_token": {c.csrf}, "decision": {decision}, "comment": {comment}})
	return status
}
