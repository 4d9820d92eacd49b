package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/storetest"
)

func TestSessionsListing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.session(t, "Thread about otters", "slack:C1:1.1", sessions.ViaSlack)
	b.session(t, "Engine minted", "workflow:itm_1", sessions.ViaEngine)
	b.session(t, "My console chat", "", sessions.ViaConsole)
	c := b.signedIn(t, "viewer")

	status, page := c.get("/sessions")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Thread about otters")
	require.Contains(t, page, "My console chat")
	require.NotContains(t, page, "Engine minted", "workflow sessions are off by default")
	require.Regexp(t, `<span class="badge channel slack">Slack</span>`, page, "a channel session's badge names its platform")

	toggle := regexp.MustCompile(`<a class="toggle" href="([^"]+)" data-origin="workflow">workflow<span class="sr-only"> \(hidden; select to show\)</span>`).FindStringSubmatch(page)
	require.NotNil(t, toggle, "the workflow toggle is off and links to turning it on")
	on := strings.ReplaceAll(toggle[1], "&amp;", "&")
	_, page = c.get(on)
	require.Contains(t, page, "Engine minted")
	require.Contains(t, page, "Thread about otters", "each origin toggles independently")
	require.Regexp(t, `<a class="toggle on" href="[^"]+" data-origin="workflow">workflow<span class="sr-only"> \(shown; select to hide\)</span>`, page)

	_, page = c.get("/sessions?origin=workflow")
	require.Contains(t, page, "Engine minted")
	require.NotContains(t, page, "Thread about otters")

	_, page = c.get("/sessions?origin=user,channel,workflow&q=otter")
	require.Contains(t, page, "Thread about otters")
	require.NotContains(t, page, "Engine minted")

	_, page = c.get("/sessions?origin=")
	require.Contains(t, page, "No sessions match")

	status, _ = c.get("/sessions?cursor=garbage")
	require.Equal(t, http.StatusBadRequest, status)
}

func TestSessionsEmptyStateAndPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, "steward")
	_, page := c.get("/sessions")
	require.Contains(t, page, "No sessions yet")
	require.Contains(t, page, "@Holdfast", "the empty state says how to start a session")

	for i := range 55 {
		b.session(t, "Chat "+string(rune('A'+i%26))+strings.Repeat("x", i/26), "", sessions.ViaConsole)
	}
	_, page = c.get("/sessions")
	require.Equal(t, 50, strings.Count(page, `class="row session-row"`))
	next := regexp.MustCompile(`<a class="button" href="([^"]+)" rel="next">`).FindStringSubmatch(page)
	require.NotNil(t, next)
	_, page2 := c.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	require.Equal(t, 5, strings.Count(page2, `class="row session-row"`))
	require.NotContains(t, page2, `rel="next"`)
	require.Contains(t, page2, ">Newest<")
}

func TestSessionPageAndActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")
	viewer := b.signedIn(t, "viewer")

	status, _, resp := steward.post("/sessions", url.Values{"title": {"Ops questions"}})
	require.Equal(t, http.StatusSeeOther, status)
	path := resp.Header.Get("Location")
	id := strings.TrimPrefix(path, "/sessions/")
	s, err := b.sess.GetByID(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.OriginUser, s.Origin)

	status, page := steward.get(path)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Ops questions")
	require.Contains(t, page, `name="text"`, "a user session has a message box")
	require.Contains(t, page, `hx-get="/sessions/`+id+`/events?after=`)

	status, _, _ = steward.post(path+"/messages", url.Values{"text": {"hello holdfast"}})
	require.Equal(t, http.StatusSeeOther, status)
	storetest.Until(t, b.db, func() bool {
		evs, err := b.sess.Events(ctx, id, time.Time{}, 100)
		require.NoError(t, err)
		return len(evs) > 0 && evs[len(evs)-1].Type == store.EventAssistantMessage
	}, 10*time.Second, "the chat turn answers")
	_, page = steward.get(path)
	require.Contains(t, page, "hello holdfast")

	status, _, _ = steward.post(path+"/policy", url.Values{"policy": {"manual"}})
	require.Equal(t, http.StatusSeeOther, status)
	s, _ = b.sess.GetByID(ctx, id)
	require.Equal(t, store.PolicyManual, s.Policy)
	status, _, _ = steward.post(path+"/policy", url.Values{"policy": {"reckless"}})
	require.Equal(t, http.StatusSeeOther, status)
	_, page = steward.get(path)
	require.Contains(t, page, "policy must be manual, auto or yolo")

	status, _, _ = steward.post(path+"/commands", url.Values{"command": {"/compact"}})
	require.Equal(t, http.StatusSeeOther, status)
	_, page = steward.get(path)
	require.Contains(t, page, `data-type="compact_summary"`)

	evs, err := b.sess.Events(ctx, id, time.Time{}, 100)
	require.NoError(t, err)
	status, _, resp = steward.post(path+"/fork", url.Values{"at_ts": {evs[0].TS.Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusSeeOther, status)
	forkID := strings.TrimPrefix(resp.Header.Get("Location"), "/sessions/")
	require.NotEqual(t, id, forkID)
	forked, err := b.sess.Events(ctx, forkID, time.Time{}, 100)
	require.NoError(t, err)
	require.Len(t, forked, 1, "a fork holds only the events up to the chosen one")

	status, _, _ = steward.post(path+"/archive", nil)
	require.Equal(t, http.StatusSeeOther, status)
	_, list := steward.get("/sessions")
	require.NotContains(t, list, `href="/sessions/`+id+`"`)
	require.Contains(t, list, `href="/sessions/`+forkID+`"`, "the fork is listed")
	_, list = steward.get("/sessions?archived=1")
	require.Contains(t, list, `href="/sessions/`+id+`"`)
	status, _, _ = steward.post(path+"/unarchive", nil)
	require.Equal(t, http.StatusSeeOther, status)

	t.Run("ViewerReadsOnly", func(t *testing.T) {
		status, page := viewer.get(path)
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, page, `name="text"`)
		require.NotContains(t, page, "Fork here")
		require.NotContains(t, page, "/archive")
		before, err := b.sess.Events(ctx, id, time.Time{}, 1000)
		require.NoError(t, err)
		for _, action := range []string{"/messages", "/archive", "/policy", "/commands", "/fork"} {
			status, _, _ := viewer.post(path+action, url.Values{"text": {"x"}, "policy": {"yolo"}, "command": {"/compact"}})
			require.Equal(t, http.StatusForbidden, status, action)
		}
		status, _, _ = viewer.post("/sessions", url.Values{"title": {"x"}})
		require.Equal(t, http.StatusForbidden, status)
		after, err := b.sess.Events(ctx, id, time.Time{}, 1000)
		require.NoError(t, err)
		require.Equal(t, len(before), len(after), "refused actions changed nothing")
	})

	t.Run("PollAfter", func(t *testing.T) {
		evs, err := b.sess.Events(ctx, id, time.Time{}, 1000)
		require.NoError(t, err)
		s, err := b.sess.GetByID(ctx, id)
		require.NoError(t, err)
		last := url.QueryEscape(evs[len(evs)-1].TS.Format(time.RFC3339Nano)) + "&status=" + s.Status
		status, body := viewer.get(path + "/events?after=" + last)
		require.Equal(t, http.StatusNoContent, status)
		require.Empty(t, body)
		_, err = b.sess.AppendEvent(ctx, id, store.EventAssistantMessage, "holdfast", map[string]any{"text": "**new** reply"})
		require.NoError(t, err)
		status, body = viewer.get(path + "/events?after=" + last)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "<strong>new</strong> reply")
		require.Contains(t, body, `id="poll"`, "the fragment carries the next tail")
		require.Equal(t, 1, strings.Count(body, `<li class="event`))
		status, _ = viewer.get(path + "/events?after=yesterday")
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = viewer.get("/sessions/ses_missing/events")
		require.Equal(t, http.StatusNotFound, status)
		status, _ = viewer.get("/sessions/ses_missing")
		require.Equal(t, http.StatusNotFound, status)
	})

	// The page read the session before its transcript: a turn that settled
	// between the two reads left the page showing the reply with the old
	// status, and a cancelled turn appends no event at all. The poll
	// carries the status the page shows and answers when it moved.
	t.Run("PollFollowsTheStatus", func(t *testing.T) {
		evs, err := b.sess.Events(ctx, id, time.Time{}, 1000)
		require.NoError(t, err)
		s, err := b.sess.GetByID(ctx, id)
		require.NoError(t, err)
		last := url.QueryEscape(evs[len(evs)-1].TS.Format(time.RFC3339Nano))
		status, body := viewer.get(path + "/events?after=" + last + "&status=" + store.SessionRunning)
		require.Equal(t, http.StatusOK, status, "the page shows running; the session is %s", s.Status)
		require.Contains(t, body, `id="session-status"`)
		require.Contains(t, body, ">"+s.Status+"<")
		require.Zero(t, strings.Count(body, `<li class="event`), "no event is new")
		require.Contains(t, body, "status="+s.Status, "the next poll carries the status now shown")
		status, _ = viewer.get(path + "/events?after=" + last + "&status=" + s.Status)
		require.Equal(t, http.StatusNoContent, status, "nothing moved")
	})

	// SPEC §5: a message typed in the console into a Slack-bound session
	// is recorded there, and the bridge posts it into the thread.
	t.Run("SlackSessionTakesMessages", func(t *testing.T) {
		sl := b.session(t, "Slack thread", "slack:C9:9.9", sessions.ViaSlack)
		_, page := steward.get("/sessions/" + sl.ID)
		require.Contains(t, page, `name="text"`)
		require.Contains(t, page, "posted into its Slack thread")
		status, _, _ := steward.post("/sessions/"+sl.ID+"/messages", url.Values{"text": {"hello from the console"}})
		require.Equal(t, http.StatusSeeOther, status)
		evs, err := b.sess.Events(ctx, sl.ID, time.Time{}, 100)
		require.NoError(t, err)
		var said []string
		for _, e := range evs {
			if e.Type == store.EventUserMessage {
				text, _ := e.Payload["text"].(string)
				said = append(said, text)
			}
		}
		require.Equal(t, "hello from the console", said[len(said)-1])
		_, page = viewer.get("/sessions/" + sl.ID)
		require.NotContains(t, page, `name="text"`, "a viewer may not write")
	})
}

func TestLongTranscriptShowsNewest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.session(t, "Chatty", "", sessions.ViaConsole)
	for i := range 305 {
		_, err := b.sess.AppendEvent(ctx, s.ID, store.EventUserMessage, "U1", map[string]any{"text": "line " + strconv.Itoa(i)})
		require.NoError(t, err)
	}
	c := b.signedIn(t, "viewer")
	_, page := c.get("/sessions/" + s.ID)
	require.Contains(t, page, "Showing the latest 300 of 306 events.")
	require.Contains(t, page, ">line 304<")
	require.NotContains(t, page, ">line 4<")
	require.Equal(t, 300, strings.Count(page, `<li class="event`))
}

// TestCommandsTypedInTheMessageBox: /status, /compact and /terminate typed
// into a console session's message box act and answer in its transcript.
func TestCommandsTypedInTheMessageBox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")
	for _, tc := range []struct {
		text, answer string
		also         string // a further sign the command acted
	}{
		{"/status", "<strong>Status</strong> <code>idle</code> · posture <code>auto</code>", ""},
		{"/compact", "Compacted 1 event into the summary above", `data-type="compact_summary"`},
		{"/terminate", "Terminated: nothing was running in this session.", ""},
	} {
		t.Run(strings.TrimPrefix(tc.text, "/"), func(t *testing.T) {
			status, _, resp := steward.post("/sessions", url.Values{"title": {"Typed " + tc.text}})
			require.Equal(t, http.StatusSeeOther, status)
			path := resp.Header.Get("Location")

			status, _, resp = steward.post(path+"/messages", url.Values{"text": {tc.text}})
			require.Equal(t, http.StatusSeeOther, status)
			require.Equal(t, path, resp.Header.Get("Location"))
			_, page := steward.get(path)
			require.Contains(t, page, "Command "+tc.text, "the transcript says the command ran")
			require.Contains(t, page, tc.answer, "and shows its answer")
			require.Contains(t, page, tc.also)

			// The live tail carries the answer too.
			evs, err := b.sess.Events(ctx, strings.TrimPrefix(path, "/sessions/"), time.Time{}, 100)
			require.NoError(t, err)
			require.Equal(t, store.EventAssistantMessage, evs[len(evs)-1].Type)
			_, frag := steward.get(path + "/events?after=" + url.QueryEscape(evs[0].TS.Format(time.RFC3339Nano)))
			require.Contains(t, frag, tc.answer)
		})
	}
}

// TestSessionEndNamesWhoEndedIt: a session a console user terminated says
// who by name on its page, never by user id.
func TestSessionEndNamesWhoEndedIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.session(t, "Ended by a person", "", sessions.ViaConsole)
	u := b.users["steward"]
	status, reason := store.SessionCancelled, "terminated by user:"+u.ID
	_, _, err := b.db.SessionUpdate(ctx, &store.SessionUpdateParams{ID: s.ID, Status: &status, DoneReason: &reason})
	require.NoError(t, err)
	c := b.signedIn(t, "viewer")
	_, page := c.get("/sessions/" + s.ID)
	require.Contains(t, page, "terminated by steward")
	require.NotContains(t, page, u.ID)
}

// TestTranscriptNamesSlackUsers: a Slack user is named in the transcript by
// the name the bridge cached for them, wherever they act (a posture change,
// an event with no speaker of its own), never as an id.
func TestTranscriptNamesSlackUsers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.session(t, "Named people", "", sessions.ViaConsole)
	require.NoError(t, b.db.SlackUserPut(ctx, &store.SlackUser{ID: "USTELLA", Name: "Stella Steward"}))
	_, err := b.sess.SetPolicy(ctx, s.ID, store.PolicyManual, engine.Decider{SlackUserID: "USTELLA", Via: "slack"})
	require.NoError(t, err)
	_, page := b.signedIn(t, "viewer").get("/sessions/" + s.ID)
	require.Contains(t, page, "Stella Steward")
	require.NotContains(t, page, "USTELLA")
}

// TestTranscriptShowsSpeakersAndToolCalls: a message shows the speaker
// recorded with it (a Slack display name), and a chat turn's tool call
// shows the tool, its input and its result.
func TestTranscriptShowsSpeakersAndToolCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.session(t, "Library questions", "", sessions.ViaConsole)
	_, err := b.sess.AppendEvent(ctx, s.ID, store.EventUserMessage, "slack:U1", map[string]any{"text": "what do the briefs say?", "speaker": "Ada Lovelace"})
	require.NoError(t, err)
	_, err = b.sess.AppendEvent(ctx, s.ID, store.EventToolResult, "holdfast", map[string]any{"tool_id": "search_memos", "operation": "call",
		"call_id": "call_1", "tool_input": map[string]any{"query": "tag:brief since:7d"},
		"result": map[string]any{"memos": []any{map[string]any{"id": "mem_1", "title": "Otter census brief"}}}})
	require.NoError(t, err)
	c := b.signedIn(t, "viewer")
	_, page := c.get("/sessions/" + s.ID)
	require.Contains(t, page, "Ada Lovelace")
	require.Contains(t, page, "Tool search_memos")
	require.Contains(t, page, "tag:brief since:7d")
	require.Contains(t, page, "Otter census brief")

	// A Slack edit and deletion show as what happened, beside the first
	// text (the transcript is append-only).
	_, err = b.sess.AppendEvent(ctx, s.ID, "message_edited", "slack:U1", map[string]any{"ts": "1.1", "text": "what do the notes say?"})
	require.NoError(t, err)
	_, err = b.sess.AppendEvent(ctx, s.ID, "message_deleted", "slack:U1", map[string]any{"ts": "1.1"})
	require.NoError(t, err)
	_, page = c.get("/sessions/" + s.ID)
	require.Contains(t, page, "Edited a message to read: “what do the notes say?”")
	require.Contains(t, page, "Deleted a message")
}

// TestTranscriptShowsWronglyShapedEvents: an event whose payload has a
// value of the wrong type is shown with that field empty and the rest as
// written, never dropped (as the untyped readers showed it).
func TestTranscriptShowsWronglyShapedEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.session(t, "Odd rows", "", sessions.ViaConsole)
	_, err := b.sess.AppendEvent(ctx, s.ID, "hold_decided", "engine", map[string]any{"holdId": "hld_odd", "status": "approved",
		"decidedBy": "ada", "decidedVia": "console", "comment": 5})
	require.NoError(t, err)
	_, err = b.sess.AppendEvent(ctx, s.ID, store.EventUserMessage, "slack:U1", map[string]any{"text": "still here", "speaker": []any{"x"}})
	require.NoError(t, err)
	c := b.signedIn(t, "viewer")
	_, page := c.get("/sessions/" + s.ID)
	require.Contains(t, page, "Hold approved by ada via console")
	require.Contains(t, page, "/holds/hld_odd")
	require.Contains(t, page, "still here")
}
