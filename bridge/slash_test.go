package bridge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// slash posts a signed /holdfast command as Slack does (form-encoded).
func (tb *testBundle) slash(t *testing.T, user, channel, text string) (int, string) {
	t.Helper()
	form := url.Values{"token": {"ignored"}, "team_id": {fakeslack.TeamID}, "channel_id": {channel}, "user_id": {user},
		"command": {"/holdfast"}, "text": {text}, "response_url": {tb.slack.ResponseURL("1")},
		"trigger_id": {fmt.Sprintf("trig-%d", time.Now().UnixNano())}, "api_app_id": {"A1"}}
	return tb.post(t, "/slack/commands", "application/x-www-form-urlencoded", []byte(form.Encode()))
}

// TestSlashCommand: /holdfast help, workflows and holds answer at once,
// ephemerally; run posts a top-level message whose thread becomes the
// session and queues the workflow there, as a mention would; anything else
// gets help; an unsigned command is refused.
func TestSlashCommand(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.addWorkflow(t, "/resting", "paused", "Rests")
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"Help", "help", []string{"`run &lt;command&gt; &lt;brief&gt;`", "`holds`"}},
		{"Empty", "", []string{"/holdfast &lt;subcommand&gt;"}},
		{"Unknown", "frobnicate now", []string{"/holdfast &lt;subcommand&gt;"}},
		{"Workflows", "workflows", []string{"`draft-memo` — Drafts one memo", "/holdfast run &lt;command&gt; &lt;brief&gt;"}},
		{"NoHolds", "holds", []string{"None of your runs waits for a steward"}},
		{"RunUnknown", "run nope brief", []string{"There is no workflow `nope`"}},
		{"RunNothing", "run", []string{"Usage: `/holdfast run"}},
		{"RunPaused", "run resting now", []string{"I can't run `resting`: it is paused, not live"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := tb.slash(t, "U1", "CS", tc.text)
			require.Equal(t, http.StatusOK, status, body)
			var resp map[string]string
			require.NoError(t, json.Unmarshal([]byte(body), &resp), body)
			require.Equal(t, "ephemeral", resp["response_type"])
			for _, w := range tc.want {
				require.Contains(t, resp["text"], w)
			}
			requireSlackEscaped(t, resp["text"])
		})
	}
	tb.quiet(t)
	require.Empty(t, tb.slack.Delivered("chat.postMessage"), "answered in the response, nothing posted")

	status, body := tb.slash(t, "U1", "CS", "run draft-memo Lichens\nLichens grow slowly.")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, body, "stored, acknowledged with an empty 200")
	rootPost := tb.waitPost(t, "CS", "", func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "ran `/holdfast run draft-memo") })
	require.Contains(t, rootPost.Form["text"], "<@U1>")
	root := rootPost.TS
	tb.waitPost(t, "CS", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Queued `draft-memo`") })
	_, holdID := tb.holdCard(t, "CS", root)
	ses := tb.threadSession(t, "CS", root)
	require.Equal(t, store.OriginChannel, ses.Origin)
	item, err := tb.store.QueueItemGetByID(tb.ctx, mustHold(t, tb, holdID).ItemID)
	require.NoError(t, err)
	require.Equal(t, "slack:CS:"+root, item.DedupeKey, "the dedupe key of a mention in that thread")
	require.Equal(t, "Lichens", item.Payload["title"])
	require.Equal(t, "slack:U1", item.OwnerUID)

	// Holds are listed as App Home lists them: all of them to a steward,
	// who decides them; to anyone else only the ones they asked for, so
	// no one reads another's titles (a DM's among them) here.
	for _, tc := range []struct {
		user  string
		shown bool
		head  string
	}{
		{"USTEWARD", true, "*Open holds*"},
		{"U1", true, "*Your open holds*"},
		{"U2", false, "None of your runs waits for a steward"},
	} {
		status, body = tb.slash(t, tc.user, "CS", "holds")
		require.Equal(t, http.StatusOK, status)
		text := unescapeJSON(body)
		require.Contains(t, text, tc.head, tc.user)
		if !tc.shown {
			require.NotContains(t, text, "Lichens", tc.user)
			continue
		}
		require.Contains(t, text, "*Lichens*", tc.user)
		require.Contains(t, text, "http://holdfast.test/holds/"+holdID, tc.user)
		requireWordsNotIDs(t, text)
		require.Contains(t, text, fakeslack.Permalink("CS", root), tc.user)
	}

	status, _ = tb.postSigned(t, "/slack/commands", "application/x-www-form-urlencoded", []byte("command=%2Fholdfast&text=help"),
		time.Now().Unix(), "v0="+strings.Repeat("ab", 32))
	require.Equal(t, http.StatusUnauthorized, status)
	tb.quiet(t)
	require.Len(t, tb.posts("CS", ""), 1, "one top-level message")
}

// TestSlashRunWhereICannotPost: `/holdfast run` in a channel Slack will
// not let the bot post in (not a member, archived) starts nothing and
// says why, once, at the command's response_url: the one way to reach
// the user there.
func TestSlashRunWhereICannotPost(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	status, body := tb.slash(t, "U1", fakeslack.ChannelGone, "run draft-memo Lichens")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, body)
	var answer fakeslack.Call
	tb.eventually(t, func() bool {
		calls := tb.slack.Delivered("response_url")
		if len(calls) > 0 {
			answer = calls[0]
		}
		return len(calls) > 0
	}, 10*time.Second, "no answer at the response_url")
	require.Equal(t, "/commands/1", answer.Form["path"])
	require.Equal(t, "ephemeral", answer.Form["response_type"])
	require.Contains(t, answer.Form["text"], "`draft-memo` did not start")
	require.Contains(t, answer.Form["text"], "channel_not_found")
	require.Contains(t, answer.Form["text"], "/invite")
	tb.quiet(t)
	require.Len(t, tb.slack.Delivered("response_url"), 1, "answered once")
	require.Empty(t, tb.slack.Messages(fakeslack.ChannelGone))
	counts, err := tb.store.QueueItemCountByStatus(tb.ctx)
	require.NoError(t, err)
	for status, n := range counts {
		require.Zero(t, n, "nothing was queued: %s", status)
	}
}

func mustHold(t *testing.T, tb *testBundle, id string) *store.Hold {
	t.Helper()
	h, err := tb.store.HoldGetByID(tb.ctx, id)
	require.NoError(t, err)
	return h
}

// TestRunWorkflowShortcut: the run_workflow message shortcut opens a modal
// at once, choosing among live workflows with the brief prefilled from the
// message (as markdown); its submission queues the workflow in that
// message's thread session, as a mention there would, once.
func TestRunWorkflowShortcut(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.slack.AddUser(fakeslack.User{ID: "U2", Name: "grace", DisplayName: "Grace"})
	msgTS := tb.ts()
	status, _ := tb.interact(t, map[string]any{"type": "message_action", "callback_id": "run_workflow", "trigger_id": "trig-sc",
		"user": map[string]any{"id": "U1"}, "channel": map[string]any{"id": "CW"}, "message_ts": msgTS,
		"message": map[string]any{"type": "message", "ts": msgTS, "user": "U2",
			"text": "Herons &amp; egrets, see <https://birds.example|the guide> <@U2>"}})
	require.Equal(t, http.StatusOK, status)
	require.Len(t, tb.slack.Views(), 1)
	view := viewOf(t, tb.slack.Views()[0])
	require.Equal(t, []any{"modal", "run_workflow"}, []any{view["type"], view["callback_id"]})
	var meta map[string]string
	require.NoError(t, json.Unmarshal([]byte(view["private_metadata"].(string)), &meta))
	require.Equal(t, map[string]string{"channel": "CW", "threadTs": msgTS}, meta)
	sel := blockByID(view, "workflow")["element"].(map[string]any)
	require.Equal(t, []any{"static_select", "workflow"}, []any{sel["type"], sel["action_id"]})
	var commands []string
	for _, o := range sel["options"].([]any) {
		commands = append(commands, o.(map[string]any)["value"].(string))
	}
	require.Contains(t, commands, "/draft-memo")
	brief := blockByID(view, "brief")["element"].(map[string]any)
	require.Equal(t, "brief", brief["action_id"])
	require.Equal(t, "Herons & egrets, see [the guide](https://birds.example) @U2", brief["initial_value"],
		"prefilled as markdown (from the cache alone: the modal must open at once)")

	submit := map[string]any{"type": "view_submission", "user": map[string]any{"id": "U1"},
		"view": map[string]any{"id": "VRUN1", "type": "modal", "callback_id": "run_workflow", "private_metadata": view["private_metadata"],
			"state": map[string]any{"values": map[string]any{
				"workflow": map[string]any{"workflow": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": "/draft-memo"}}},
				"brief":    map[string]any{"brief": map[string]any{"type": "plain_text_input", "value": "Herons and egrets"}},
			}}}}
	for range 2 { // a redelivery queues nothing more
		status, body := tb.interact(t, submit)
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, body)
	}
	tb.waitPost(t, "CW", msgTS, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Queued `draft-memo`") })
	_, holdID := tb.holdCard(t, "CW", msgTS)
	h := mustHold(t, tb, holdID)
	require.Equal(t, "Herons and egrets", h.Title)
	item, err := tb.store.QueueItemGetByID(tb.ctx, h.ItemID)
	require.NoError(t, err)
	require.Equal(t, "slack:CW:shortcut:VRUN1", item.DedupeKey)
	require.Equal(t, tb.threadSession(t, "CW", msgTS).ID, item.SessionID)
	tb.quiet(t)
	queued := 0
	for _, p := range tb.posts("CW", msgTS) {
		if strings.Contains(p.Form["text"], "Queued") {
			queued++
		}
	}
	require.Equal(t, 1, queued)
}

// slackToken is what may follow a '<' in text sent to Slack: a mention, a
// channel, a special mention or a link. Any other '<' must be sent as
// &lt;, or Slack reads what follows as a link ("`<command>`" shows as a
// link named "command").
var slackToken = regexp.MustCompile(`^<(?:[@#!]|https?:|mailto:)`)

func requireSlackEscaped(t *testing.T, text string) {
	t.Helper()
	for rest := text; ; {
		i := strings.IndexByte(rest, '<')
		if i < 0 {
			return
		}
		require.Regexp(t, slackToken, rest[i:], "an unescaped '<' in %q", text)
		rest = rest[i+1:]
	}
}

// idLabel is a link labelled with an internal id (<…|hold hld_…>).
var idLabel = regexp.MustCompile(`<[^|>]+\|[^>]*\b(hld|run|itm|ses|mem)_[0-9a-z]`)

// requireWordsNotIDs requires that no link in text sent to Slack is
// labelled with an id: people read the label, so it says where it goes.
func requireWordsNotIDs(t *testing.T, text string) {
	t.Helper()
	require.NotRegexp(t, idLabel, text)
}
