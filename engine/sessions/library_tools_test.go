package sessions_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// TestTurnSearchesAndReadsMemos: a model scripted to call search_memos
// (the query grammar) and then read_memo gets each tool's result in its
// next request, its answer is the reply, and the transcript records both
// calls with their results (tool_result events, as the console shows them).
func TestTurnSearchesAndReadsMemos(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var memoID string
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		switch n {
		case 1:
			completion(w, toolsAnswer(toolCall("call_s", "search_memos", map[string]any{"query": "otters tag:brief since:7d"})))
		case 2:
			completion(w, toolsAnswer(toolCall("call_r", "read_memo", map[string]any{"id": memoID})))
		default:
			completion(w, answer("The otter brief says to count them at dawn."))
		}
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	m, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Otter census brief", Body: "Count the otters at dawn.\n\n" + strings.Repeat("More detail. ", 2000),
		Tags: []string{"brief"}})
	require.NoError(t, err)
	memoID = m.ID
	_, err = b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Otter notes", Body: "Otters, untagged."})
	require.NoError(t, err)
	_, err = b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Otter workflow", Body: "otters tag:brief", MemoType: store.MemoTypeWorkflow,
		Workflow: &store.WorkflowIndex{Command: "/otters", Status: "draft"}})
	require.NoError(t, err)
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)

	res, err := b.svc.Message(ctx, ses.ID, "What does the otter brief say?", engine.Decider{UserID: "u1", Username: "ada", Via: "console"}, false)
	require.NoError(t, err)
	require.Equal(t, "The otter brief says to count them at dawn.", res.Reply.Payload["text"])

	reqs := cs.requests()
	require.Len(t, reqs, 3)
	last := func(i int) map[string]any {
		msgs := reqs[i]["messages"].([]any)
		return msgs[len(msgs)-1].(map[string]any)
	}
	require.Equal(t, "ada: What does the otter brief say?", last(0)["content"], "the model sees who asked")
	// The second request carries the search's result: the tagged brief
	// only (not the untagged note, not the workflow memo), its text cut.
	require.Equal(t, "tool", last(1)["role"])
	require.Equal(t, "call_s", last(1)["tool_call_id"])
	var found struct {
		Query string
		Memos []struct{ ID, Title, Snippet string }
	}
	require.NoError(t, json.Unmarshal([]byte(last(1)["content"].(string)), &found))
	require.Equal(t, "otters tag:brief since:168h0m0s", found.Query)
	require.Len(t, found.Memos, 1)
	require.Equal(t, memoID, found.Memos[0].ID)
	require.True(t, strings.HasPrefix(found.Memos[0].Snippet, "Count the otters at dawn. More detail."))
	require.LessOrEqual(t, len([]rune(found.Memos[0].Snippet)), 241)
	// The third carries the memo, bounded.
	require.Equal(t, "call_r", last(2)["tool_call_id"])
	var read struct {
		ID, Title, Body string
		Truncated       bool
	}
	require.NoError(t, json.Unmarshal([]byte(last(2)["content"].(string)), &read))
	require.Equal(t, memoID, read.ID)
	require.True(t, strings.HasPrefix(read.Body, "Count the otters at dawn."))
	require.True(t, read.Truncated)
	require.Len(t, []rune(read.Body), 8000)

	evs := b.events(t, ses.ID)
	require.Equal(t, []string{store.EventUserMessage, store.EventToolResult, store.EventToolResult, store.EventAssistantMessage}, types(evs))
	require.Equal(t, "ada", evs[0].Payload["speaker"], "the console username is recorded with the message")
	require.Equal(t, "search_memos", evs[1].Payload["tool_id"])
	require.Equal(t, "call_s", evs[1].Payload["call_id"])
	require.Equal(t, map[string]any{"query": "otters tag:brief since:7d"}, evs[1].Payload["tool_input"])
	require.Len(t, evs[1].Payload["result"].(map[string]any)["memos"], 1)
	require.Equal(t, "read_memo", evs[2].Payload["tool_id"])
	require.Equal(t, map[string]any{"id": memoID}, evs[2].Payload["tool_input"])
	require.Equal(t, true, evs[2].Payload["result"].(map[string]any)["truncated"])
}

// TestLibraryToolRefusals: a query that does not parse, a memo that does
// not exist and a missing id are results the model can act on, not a
// failed turn.
func TestLibraryToolRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		if n == 1 {
			completion(w, toolsAnswer(
				toolCall("c1", "search_memos", map[string]any{"query": "tag:brief since:lately"}),
				toolCall("c2", "read_memo", map[string]any{"id": "mem_missing"}),
				toolCall("c3", "read_memo", map[string]any{})))
			return
		}
		completion(w, answer("I could not find it."))
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	res, err := b.svc.Message(ctx, ses.ID, "find the brief", user("u"), false)
	require.NoError(t, err)
	require.Equal(t, "I could not find it.", res.Reply.Payload["text"])
	evs := b.events(t, ses.ID)
	require.Equal(t, []string{store.EventUserMessage, store.EventToolResult, store.EventToolResult, store.EventToolResult, store.EventAssistantMessage}, types(evs))
	for i, says := range []string{"since:lately is not a window", `no memo has id "mem_missing"`, "id is required"} {
		require.Contains(t, evs[1+i].Payload["result"].(map[string]any)["error"], says)
	}
}

// TestTurnNamesSpeakers: in a conversation of several people the model
// is told who wrote each message: a console username, a Slack display
// name recorded with the message, or one cached by the bridge.
func TestTurnNamesSpeakers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		completion(w, answer("ok"))
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	require.NoError(t, b.db.SlackUserPut(ctx, &store.SlackUser{ID: "U2", Name: "Bob", FetchedAt: time.Now()}))
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	_, err = b.svc.AppendEvent(ctx, ses.ID, store.EventUserMessage, "slack:U2", map[string]any{"text": "I said this in the thread"})
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "and I asked in Slack", engine.Decider{SlackUserID: "U1", DisplayName: "Ada", Via: "slack"}, false)
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "and I from the console", engine.Decider{UserID: "u3", Username: "carol", Via: "console"}, false)
	require.NoError(t, err)
	var sent []string
	for _, m := range cs.requests()[1]["messages"].([]any) {
		if mm := m.(map[string]any); mm["role"] == "user" {
			sent = append(sent, mm["content"].(string))
		}
	}
	require.Equal(t, []string{"Bob: I said this in the thread", "Ada: and I asked in Slack", "carol: and I from the console"}, sent)
}
