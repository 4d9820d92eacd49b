package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runSlackThreads covers what the bridge keeps to read a thread: Slack
// users' names and the durable thread backfill (SPEC §5).
func runSlackThreads(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("SlackUserCache", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.SlackUserGet(ctx, "U1")
		require.ErrorIs(t, err, store.ErrNotFound)
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		require.NoError(t, s.SlackUserPut(ctx, &store.SlackUser{ID: "U1", Name: "Ada", FetchedAt: at}))
		require.NoError(t, s.SlackUserPut(ctx, &store.SlackUser{ID: "U1", Name: "Ada L.", FetchedAt: at.Add(time.Hour)}))
		u, err := s.SlackUserGet(ctx, "U1")
		require.NoError(t, err)
		require.Equal(t, store.SlackUser{ID: "U1", Name: "Ada L.", FetchedAt: at.Add(time.Hour)}, *u, "a put replaces the name")
		require.ErrorIs(t, s.SlackUserPut(ctx, &store.SlackUser{Name: "nobody"}), store.ErrInvalid)
		require.NoError(t, s.SlackUserPut(ctx, &store.SlackUser{ID: "U0", Name: "Bo", FetchedAt: at}))
		all, err := s.SlackUserList(ctx)
		require.NoError(t, err)
		require.Equal(t, []*store.SlackUser{{ID: "U0", Name: "Bo", FetchedAt: at}, {ID: "U1", Name: "Ada L.", FetchedAt: at.Add(time.Hour)}}, all)
	})

	t.Run("SlackBackfillPagesOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.SlackBackfillAdd(ctx, &store.SlackBackfillAddParams{SessionID: "ses_missing", Channel: "C1", ThreadTS: "1.0", Before: "2.0"})
		require.ErrorIs(t, err, store.ErrNotFound)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack",
			Tags: []string{"slack:C1:1.000001"}, Policy: store.PolicyAuto})
		require.NoError(t, err)
		_, err = s.SlackBackfillNextDue(ctx)
		require.ErrorIs(t, err, store.ErrNotFound)

		b, err := s.SlackBackfillAdd(ctx, &store.SlackBackfillAddParams{SessionID: ses.ID, Channel: "C1", ThreadTS: "1.000001", Before: "1.000009"})
		require.NoError(t, err)
		require.Equal(t, "1.000009", b.Before)
		require.False(t, b.Done)
		again, err := s.SlackBackfillAdd(ctx, &store.SlackBackfillAddParams{SessionID: ses.ID, Channel: "C1", ThreadTS: "1.000001", Before: "1.000020"})
		require.NoError(t, err)
		require.Equal(t, "1.000009", again.Before, "a session's backfill starts once")
		due, err := s.SlackBackfillDue(ctx, time.Now(), 10)
		require.NoError(t, err)
		require.Len(t, due, 1)

		page := func(cursor, next string, done bool, texts ...string) *store.SlackBackfillPageParams {
			p := &store.SlackBackfillPageParams{SessionID: ses.ID, Cursor: cursor, Next: next, Done: done}
			for _, text := range texts {
				p.Events = append(p.Events, &store.EventAppendParams{Type: store.EventUserMessage, Actor: "slack:U1",
					Payload: map[string]any{"text": text, "backfilled": true}})
			}
			return p
		}
		// Two processes record the first page at once: one wins, the other
		// is a conflict that recorded nothing.
		var (
			wg   sync.WaitGroup
			errs [2]error
		)
		for i := range 2 {
			wg.Go(func() { _, errs[i] = s.SlackBackfillPage(ctx, page("", "c2", false, "one", "two")) })
		}
		wg.Wait()
		require.ElementsMatch(t, []bool{true, false}, []bool{errs[0] == nil, errs[1] == nil}, "one page write wins: %v", errs)
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, store.ErrConflict)
			}
		}
		require.NoError(t, s.SlackBackfillRetry(ctx, ses.ID, time.Now().Add(time.Hour), "ratelimited"))
		got, err := s.SlackBackfillGet(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, "c2", got.Cursor)
		require.Equal(t, 2, got.Fetched)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, "ratelimited", got.LastError)
		due, err = s.SlackBackfillDue(ctx, time.Now(), 10)
		require.NoError(t, err)
		require.Empty(t, due, "a retry waits until its time")
		next, err := s.SlackBackfillNextDue(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(time.Hour), next, time.Minute)

		done, err := s.SlackBackfillPage(ctx, page("c2", "", true, "three"))
		require.NoError(t, err)
		require.True(t, done.Done)
		require.Equal(t, 3, done.Fetched)
		require.Zero(t, done.Attempts, "a recorded page clears the failures")
		_, err = s.SlackBackfillPage(ctx, page("", "c2", false, "again"))
		require.ErrorIs(t, err, store.ErrConflict, "a finished backfill records nothing more")
		require.ErrorIs(t, s.SlackBackfillRetry(ctx, ses.ID, time.Now(), "x"), store.ErrNotFound)
		_, err = s.SlackBackfillNextDue(ctx)
		require.ErrorIs(t, err, store.ErrNotFound)

		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID})
		require.NoError(t, err)
		var texts []string
		for _, e := range evs {
			texts = append(texts, e.Payload["text"].(string))
		}
		require.Equal(t, []string{"one", "two", "three"}, texts, "each page once, in order")
	})
}
