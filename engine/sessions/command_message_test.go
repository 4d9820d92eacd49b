package sessions_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// TestCommandTypedAsMessageIsAnswered: a core command sent as a message (the
// console's message box, POST …/messages) acts and is answered in the
// transcript: a command event says who asked, an assistant_message answers.
func TestCommandTypedAsMessageIsAnswered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	for _, tc := range []struct {
		name, text string
		newTypes   []string // events the command appends
		answer     string
	}{
		{"Status", "/status", []string{store.EventCommand, store.EventAssistantMessage},
			"**Status** `done` (completed) · posture `auto` · 2 events"},
		{"StatusAnyCase", "  /STATUS ", []string{store.EventCommand, store.EventAssistantMessage}, "**Status** `done`"},
		{"Compact", "/compact", []string{store.EventCommand, store.EventCompactSummary, store.EventAssistantMessage},
			"Compacted 2 events into the summary above; later replies start from it."},
		{"Terminate", "/terminate", []string{store.EventCommand, store.EventAssistantMessage},
			"Terminated: cancelled 1 workflow run."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
			require.NoError(t, err)
			_, err = b.svc.Message(ctx, ses.ID, "hello", user("u"), false)
			require.NoError(t, err)

			res, err := b.svc.Message(ctx, ses.ID, tc.text, user("u"), false)
			require.NoError(t, err)
			cmd := strings.ToLower(strings.TrimSpace(tc.text))
			require.Equal(t, cmd, res.Command.Command)
			evs := b.events(t, ses.ID)
			require.Equal(t, append([]string{store.EventUserMessage, store.EventAssistantMessage}, tc.newTypes...), types(evs))
			asked, answered := evs[2], evs[len(evs)-1]
			require.Equal(t, "user:u", asked.Actor, "the command event says who asked")
			require.Equal(t, cmd, asked.Payload["command"])
			require.Equal(t, "holdfast", answered.Actor)
			require.Equal(t, cmd, answered.Payload["command"], "the answer names its command")
			require.Contains(t, answered.Payload["text"], tc.answer)
			require.Equal(t, answered.ID, res.Reply.ID, "the answer is the result's reply")
		})
	}

	t.Run("UnknownSession", func(t *testing.T) {
		_, err := b.svc.Message(ctx, "ses_nope", "/status", user("u"), false)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestTerminateTypedDuringATurn: /terminate typed while a reply is being
// written stops it and says so; the stopped turn adds no reply of its own.
func TestTerminateTypedDuringATurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, arrived, _ := blockingServer(t)
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "write me an epic", user("u"), true)
	require.NoError(t, err)
	<-arrived

	res, err := b.svc.Message(ctx, ses.ID, "/terminate", user("u"), true)
	require.NoError(t, err)
	require.True(t, res.Command.CancelledTurn)
	require.Equal(t, "Terminated: stopped the reply in progress and cancelled 1 workflow run.", res.Reply.Payload["text"])
	require.Equal(t, []string{store.EventUserMessage, store.EventCommand, store.EventAssistantMessage}, types(b.events(t, ses.ID)))
}

// TestCommandAnswersAreNotTheModelsWords: a later model turn sees a
// command's answer as a note, not as something it said.
func TestCommandAnswersAreNotTheModelsWords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		completion(w, answer("ok"))
	})
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "/status", user("u"), false)
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "hi", user("u"), false)
	require.NoError(t, err)
	reqs := cs.requests()
	require.Len(t, reqs, 1, "/status asks no model")
	var sent []string
	for _, m := range reqs[0]["messages"].([]any) {
		mm := m.(map[string]any)
		sent = append(sent, mm["role"].(string)+": "+mm["content"].(string))
	}
	require.Contains(t, sent, "system: /status: **Status** `idle` · posture `auto` · 0 events")
	require.Equal(t, "user: user:u: hi", sent[len(sent)-1], "a user message names its speaker (an unknown user by its id)")
}
