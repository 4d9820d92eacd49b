package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestSeededExamples: the seeded /summarize-thread replies with its
// session's conversation, speaker by speaker (the template model), and
// /weekly-digest gathers the notes tagged brief, never the workflow memos
// whose source names the tag.
func TestSeededExamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	require.NoError(t, b.lib.SeedExamples(ctx))

	t.Run("SummarizeThread", func(t *testing.T) {
		ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Title: "launch", Origin: store.OriginChannel, Platform: "slack",
			Tags: []string{"slack:C1:1700000000.000001"}, Policy: store.PolicyAuto})
		require.NoError(t, err)
		require.NoError(t, b.db.SlackUserPut(ctx, &store.SlackUser{ID: "U2", Name: "Bob"}))
		said := []struct{ actor, speaker, text string }{
			{"slack:U1", "Ada", "Shall we launch on Monday?"},
			{"slack:U2", "", "Tuesday is safer, the release notes are not done."},
			{"slack:U1", "Ada", "Fine, Tuesday then."},
			{"slack:U2", "", "I will tell support."},
		}
		for _, s := range said {
			p := map[string]any{"text": s.text}
			if s.speaker != "" {
				p["speaker"] = s.speaker
			}
			_, err := b.db.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Actor: s.actor, Payload: p})
			require.NoError(t, err)
		}
		it := b.enqueue(t, EnqueueParams{Command: "/summarize-thread", SessionID: ses.ID, OwnerUID: "slack:U1"})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		reply := lastReply(t, b, ses.ID)
		require.True(t, strings.HasPrefix(reply, "# Summary of this thread"), reply)
		require.Contains(t, reply, "- **Ada**: Shall we launch on Monday?\n- **Bob**: Tuesday is safer, the release notes are not done.\n"+
			"- **Ada**: Fine, Tuesday then.\n- **Bob**: I will tell support.", "all four, attributed, in order")
	})

	// Without Slack, in a console session: the summary is its reply there.
	t.Run("SummarizeAConsoleSession", func(t *testing.T) {
		ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Title: "plans", Origin: store.OriginUser, Policy: store.PolicyAuto})
		require.NoError(t, err)
		_, err = b.db.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Actor: "user:usr_1",
			Payload: map[string]any{"text": "We ship the beta on Friday.", "speaker": "ada"}})
		require.NoError(t, err)
		it := b.enqueue(t, EnqueueParams{Command: "/summarize-thread", SessionID: ses.ID})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		require.Contains(t, lastReply(t, b, ses.ID), "- **ada**: We ship the beta on Friday.")
	})

	t.Run("WeeklyDigest", func(t *testing.T) {
		for i, p := range []*store.MemoCreateParams{
			{Title: "Otter census brief", Body: "Count the otters.", Tags: []string{"brief"}},
			{Title: "Heron brief", Body: "Herons are back.", Tags: []string{"Brief", "birds"}},
			{Title: "Unlisted brief", Body: "Not for the digest.", Tags: []string{"brief"}, Unlisted: true},
			{Title: "Untagged note", Body: "This mentions tag:brief in its text only."},
		} {
			_, err := b.db.MemoCreate(ctx, p)
			require.NoError(t, err, i)
		}
		it := b.enqueue(t, EnqueueParams{Command: "/weekly-digest"})
		r := b.waitRun(t, it.ID, EventRunFinished)
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
		require.NoError(t, err)
		for _, want := range []string{"## Heron brief", "Herons are back.", "## Otter census brief", "Count the otters."} {
			require.Contains(t, m.Body, want)
		}
		for _, not := range []string{"Draft memo from brief", "## Trigger", "Unlisted brief", "Untagged note"} {
			require.NotContains(t, m.Body, not, "the digest gathers the notes tagged brief only")
		}
	})
}

// lastReply is the newest reply dispatch of the session.
func lastReply(t *testing.T, b *testBundle, sessionID string) string {
	t.Helper()
	evs, err := b.db.EventList(context.Background(), &store.EventListParams{SessionID: sessionID, Types: []string{store.EventAssistantMessage},
		Newest: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "reply", evs[0].Payload["dispatch"], fmt.Sprint(evs[0].Payload))
	return evs[0].Payload["text"].(string)
}
