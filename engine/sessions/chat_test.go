package sessions_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/storetest"
)

func TestOpenAITurnCallsToolsAndEnqueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		switch n {
		case 1:
			completion(w, toolsAnswer(toolCall("call_1", "list_workflows", map[string]any{})))
		case 2:
			completion(w, toolsAnswer(toolCall("call_2", "enqueue_workflow", map[string]any{"command": "/draft-memo", "brief": "otters in winter"})))
		default:
			completion(w, answer("Queued /draft-memo for you."))
		}
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	b.liveWorkflow(t, "/draft-memo", "Drafts one memo from a brief")
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)

	res, err := b.svc.Message(ctx, ses.ID, "Please draft a memo about otters in winter", engine.Decider{SlackUserID: "U1", Via: "slack"}, true)
	require.NoError(t, err)
	storetest.Until(t, b.db, func() bool { // the turn settles with its reply
		got, err := b.svc.GetByID(ctx, ses.ID)
		return err == nil && got.Status == store.SessionDone
	}, 10*time.Second)

	enq, _ := b.eng.snapshot()
	require.Len(t, enq, 1)
	require.Equal(t, "/draft-memo", enq[0].Command)
	require.Equal(t, ses.ID, enq[0].SessionID, "the enqueue carries the session id")
	require.Equal(t, map[string]any{"brief": "otters in winter"}, enq[0].Payload, "the engine titles it")
	require.Equal(t, "slack:U1", enq[0].OwnerUID)

	evs := b.events(t, ses.ID)
	require.Equal(t, []string{store.EventUserMessage, store.EventToolResult, store.EventToolResult, store.EventAssistantMessage}, types(evs))
	require.Equal(t, res.Event.ID, evs[0].ID)
	require.Equal(t, "list_workflows", evs[1].Payload["tool_id"])
	require.Equal(t, "enqueue_workflow", evs[2].Payload["tool_id"])
	require.Equal(t, map[string]any{"command": "/draft-memo", "brief": "otters in winter"}, evs[2].Payload["tool_input"])
	require.Equal(t, map[string]any{"command": "/draft-memo", "enqueued": true, "itemId": "itm_1"}, evs[2].Payload["result"])
	require.Equal(t, "Queued /draft-memo for you.", evs[3].Payload["text"])

	reqs := cs.requests()
	require.Len(t, reqs, 3)
	require.Len(t, reqs[0]["tools"], 4, "every tool is offered")
	msgs := reqs[0]["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	require.Equal(t, "user", last["role"])
	require.Equal(t, "U1: Please draft a memo about otters in winter", last["content"], "the model answers from the transcript, speakers named")
	// The second request carries the tool call and its result on the wire.
	msgs = reqs[1]["messages"].([]any)
	toolMsg := msgs[len(msgs)-1].(map[string]any)
	require.Equal(t, "tool", toolMsg["role"])
	require.Equal(t, "call_1", toolMsg["tool_call_id"])
	require.Contains(t, toolMsg["content"], "/draft-memo")
}

func TestToolLoopIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		if body["tools"] != nil {
			completion(w, toolsAnswer(toolCall("c", "list_workflows", nil)))
			return
		}
		completion(w, answer("Here is what I found."))
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	res, err := b.svc.Message(ctx, ses.ID, "loop forever", user("u"), false)
	require.NoError(t, err)
	require.Equal(t, "Here is what I found.", res.Reply.Payload["text"])
	require.Len(t, cs.requests(), 5, "4 tool rounds, then one answer without tools")
}

func TestModelFailureIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"model does not exist","type":"invalid_request_error"}}`))
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	res, err := b.svc.Message(ctx, ses.ID, "hi", user("u"), false)
	require.NoError(t, err)
	require.Contains(t, res.Reply.Payload["text"], "model does not exist", "the thread hears why")
	got, err := b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, store.SessionFailed, got.Status)
	require.Contains(t, got.DoneReason, "model does not exist")
}

func TestCompact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TemplateDigest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		_, err = b.svc.Message(ctx, ses.ID, "first question", user("u"), false)
		require.NoError(t, err)
		res, err := b.svc.Message(ctx, ses.ID, "/compact", user("u"), false)
		require.NoError(t, err)
		require.NotNil(t, res.Command)
		sum := res.Command.Summary
		require.Equal(t, store.EventCompactSummary, sum.Type)
		require.Contains(t, sum.Payload["text"], `"first question"`)
		require.EqualValues(t, 2, sum.Payload["eventCount"])
		require.Equal(t, []string{store.EventUserMessage, store.EventAssistantMessage, store.EventCommand, store.EventCompactSummary,
			store.EventAssistantMessage}, types(b.events(t, ses.ID)), "typed as a message, /compact is answered too")
	})

	t.Run("ModelSummaryStartsLaterTurns", func(t *testing.T) {
		t.Parallel()
		cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
			if n == 2 {
				completion(w, answer("The user asked about herons."))
				return
			}
			completion(w, answer("ok"))
		})
		b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		_, err = b.svc.Message(ctx, ses.ID, "tell me about herons", user("u"), false)
		require.NoError(t, err)
		cmd, err := b.svc.Command(ctx, ses.ID, "/compact", user("u"))
		require.NoError(t, err)
		require.Equal(t, "The user asked about herons.", cmd.Summary.Payload["text"])
		_, err = b.svc.Message(ctx, ses.ID, "and egrets?", user("u"), false)
		require.NoError(t, err)
		reqs := cs.requests()
		require.Len(t, reqs, 3)
		var sent []string
		for _, m := range reqs[2]["messages"].([]any) {
			mm := m.(map[string]any)
			sent = append(sent, mm["role"].(string)+": "+mm["content"].(string))
		}
		require.Contains(t, sent, "system: Summary of the conversation so far: The user asked about herons.")
		require.Equal(t, "user: user:u: and egrets?", sent[len(sent)-1])
		for _, s := range sent {
			require.False(t, strings.Contains(s, "tell me about herons"), "compacted history is not resent")
		}
	})
}

func TestTurnTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _, _ := blockingServer(t)
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client(), timeout: 50 * time.Millisecond})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	res, err := b.svc.Message(ctx, ses.ID, "never answered", user("u"), false)
	require.NoError(t, err)
	require.Contains(t, res.Reply.Payload["text"], "the reply took too long (over 50ms)")
	got, err := b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, store.SessionFailed, got.Status)
	require.Empty(t, got.ActiveRunID)
}
