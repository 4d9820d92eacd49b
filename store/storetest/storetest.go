// Package storetest is the behaviour every store.Store implementation must
// show. The SQLite implementation runs it; a PostgreSQL one must pass it too.
package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Run exercises a fresh, empty store from newStore for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	runConsole(t, newStore)
	runLease(t, newStore)

	t.Run("MemoCreateGetSearch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Style guide", Body: "Write plainly about otters.", Tags: []string{"a", "a", " b ", "A", "Otter", "otter"}})
		require.NoError(t, err)
		require.Equal(t, int64(1), m.ContentVersion)
		require.Equal(t, store.HashContent("Write plainly about otters."), m.ContentHash)
		require.Equal(t, []string{"a", "b", "Otter"}, m.Tags, "tags match in any case, so they are kept once, as first written")
		require.Equal(t, "note", m.MemoType)

		got, err := s.MemoGetByID(ctx, m.ID)
		require.NoError(t, err)
		require.Equal(t, m.Body, got.Body)

		byTitle, err := s.MemoGetByTitle(ctx, "style GUIDE")
		require.NoError(t, err)
		require.Equal(t, m.ID, byTitle.ID)

		_, err = s.MemoGetByID(ctx, "mem_missing")
		require.ErrorIs(t, err, store.ErrNotFound)

		_, err = s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Hidden otters", Body: "otters", Unlisted: true})
		require.NoError(t, err)

		found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters"})
		require.NoError(t, err)
		require.Len(t, found, 1, "unlisted memos are left out unless asked")
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters", IncludeUnlisted: true})
		require.NoError(t, err)
		require.Len(t, found, 2)
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: `tag:brief "unbalanced`})
		require.NoError(t, err, "punctuation is searched literally, not a syntax error")
		require.Empty(t, found)
	})

	t.Run("MemoUpdateCompareAndSet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "T", Body: "first"})
		require.NoError(t, err)
		body := "second draft about herons"
		up, err := s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: m.ID, ExpectedVersion: 1, Body: &body})
		require.NoError(t, err)
		require.Equal(t, int64(2), up.ContentVersion)
		require.Equal(t, store.HashContent(body), up.ContentHash)

		stale := "stale write"
		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: m.ID, ExpectedVersion: 1, Body: &stale})
		require.ErrorIs(t, err, store.ErrConflict)
		got, err := s.MemoGetByID(ctx, m.ID)
		require.NoError(t, err)
		require.Equal(t, body, got.Body, "a stale update changes nothing")

		found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: "herons"})
		require.NoError(t, err)
		require.Len(t, found, 1, "the full-text index follows updates")
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: "first"})
		require.NoError(t, err)
		require.Empty(t, found)

		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: "mem_missing", ExpectedVersion: 1, Body: &body})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("WorkflowIndex", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		idx := &store.WorkflowIndex{Command: "/draft", Status: "live", Summary: "Drafts"}
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Draft", Body: "x", MemoType: store.MemoTypeWorkflow, Workflow: idx})
		require.NoError(t, err)
		w, err := s.WorkflowGetByCommand(ctx, "/draft")
		require.NoError(t, err)
		require.Equal(t, m.ID, w.MemoID)
		require.Equal(t, "Draft", w.Title)
		require.Empty(t, w.Errors)

		_, err = s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Dup", Body: "y", MemoType: store.MemoTypeWorkflow, Workflow: idx})
		require.ErrorIs(t, err, store.ErrConflict)
		list, err := s.WorkflowList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1, "a duplicate command writes neither memo nor index")

		broken := &store.WorkflowIndex{Status: "draft", Errors: []store.CompileError{{Line: 3, Message: "missing Command"}}}
		_, err = s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Broken", Body: "z", MemoType: store.MemoTypeWorkflow, Workflow: broken})
		require.NoError(t, err)
		list, err = s.WorkflowList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, []store.CompileError{{Line: 3, Message: "missing Command"}}, list[1].Errors)

		w, err = s.WorkflowStatusSet(ctx, m.ID, "paused")
		require.NoError(t, err)
		require.Equal(t, "paused", w.Status)
		_, err = s.WorkflowStatusSet(ctx, "mem_missing", "paused")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("UsersAndKeys", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		n, err := s.UserCount(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		u, err := s.UserCreate(ctx, &store.User{Username: "ada", PasswordHash: "h", Role: store.RoleSteward, SlackUserID: "U1"})
		require.NoError(t, err)
		_, err = s.UserCreate(ctx, &store.User{Username: "ADA", PasswordHash: "h", Role: store.RoleViewer})
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = s.UserCreate(ctx, &store.User{Username: "bob", PasswordHash: "h", Role: "root"})
		require.Error(t, err)
		got, err := s.UserGetBySlackID(ctx, "U1")
		require.NoError(t, err)
		require.Equal(t, u.ID, got.ID)
		_, err = s.UserGetByUsername(ctx, "nobody")
		require.ErrorIs(t, err, store.ErrNotFound)

		k, err := s.APIKeyCreate(ctx, &store.APIKey{Name: "ci", Role: store.RoleAdmin, KeyHash: store.HashContent("secret")})
		require.NoError(t, err)
		gotKey, err := s.APIKeyGetByHash(ctx, store.HashContent("secret"))
		require.NoError(t, err)
		require.Equal(t, k.ID, gotKey.ID)
		_, err = s.APIKeyGetByHash(ctx, store.HashContent("other"))
		require.ErrorIs(t, err, store.ErrNotFound)

		// A revoked key stops working at once, and stays listed.
		other, err := s.APIKeyCreate(ctx, &store.APIKey{Name: "ops", Role: store.RoleViewer, KeyHash: store.HashContent("ops")})
		require.NoError(t, err)
		at := time.Now().UTC().Truncate(time.Millisecond)
		revoked, err := s.APIKeyRevoke(ctx, k.ID, at)
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
		require.True(t, revoked.RevokedAt.Equal(at))
		_, err = s.APIKeyGetByHash(ctx, store.HashContent("secret"))
		require.ErrorIs(t, err, store.ErrNotFound, "a revoked key is no key")
		again, err := s.APIKeyRevoke(ctx, k.ID, at.Add(time.Hour))
		require.NoError(t, err)
		require.True(t, again.RevokedAt.Equal(at), "the first revocation is kept")
		_, err = s.APIKeyRevoke(ctx, "key_nope", at)
		require.ErrorIs(t, err, store.ErrNotFound)
		keys, err := s.APIKeyList(ctx)
		require.NoError(t, err)
		require.Len(t, keys, 2)
		require.Equal(t, []string{k.ID, other.ID}, []string{keys[0].ID, keys[1].ID})
		require.NotNil(t, keys[0].RevokedAt)
		require.Nil(t, keys[1].RevokedAt)
		_, err = s.APIKeyGetByHash(ctx, store.HashContent("ops"))
		require.NoError(t, err, "revoking one key leaves the others")
	})

	t.Run("SessionTagsAndEvents", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack", Tags: []string{"slack:C1:1.2"}, Policy: "auto"})
		require.NoError(t, err)
		_, err = s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Tags: []string{"slack:C1:1.2"}, Policy: "auto"})
		require.ErrorIs(t, err, store.ErrConflict, "one session per tag")
		got, err := s.SessionGetByTag(ctx, "slack:C1:1.2")
		require.NoError(t, err)
		require.Equal(t, ses.ID, got.ID)

		var last *store.Event
		for i := range 5 {
			ev, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeUserMessage, Actor: "U1", Payload: map[string]any{"text": fmt.Sprint(i)}})
			require.NoError(t, err)
			if last != nil {
				require.Greater(t, ev.ID, last.ID)
				require.True(t, ev.TS.After(last.TS), "ts strictly increases within a session")
			}
			last = ev
		}
		got, err = s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, int64(5), got.EventCount)
		_, err = s.EventAppend(ctx, &store.EventAppendParams{SessionID: "ses_missing", Type: transcript.TypeUserMessage})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	runWorkflows(t, newStore)
	runSessions(t, newStore)
	runSlack(t, newStore)
	runEngine(t, newStore)
	runSteward(t, newStore)
	runSearch(t, newStore)
	runSlackThreads(t, newStore)
	runInsight(t, newStore)
	runConsoleLists(t, newStore)
}
