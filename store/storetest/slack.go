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

// runSlack is the Slack bridge's part of the suite: the inbox, the outbox and
// the mirror cursor.
func runSlack(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("SlackInboxOncePerKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		added, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{
			{Key: "Ev1", Kind: store.SlackKindEvent, Body: []byte(`{"a":1}`)},
			{Key: "Ev1", Kind: store.SlackKindEvent, Body: []byte(`{"a":1}`)},
			{Key: "Ev2", Kind: store.SlackKindEvent, Body: []byte(`{"a":2}`)},
		})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, added, "a redelivered key is stored once")
		added, err = s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: "Ev2", Kind: store.SlackKindEvent, Body: []byte(`{}`)}})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, added)

		pending, err := s.SlackInboxPending(ctx, 10)
		require.NoError(t, err)
		require.Len(t, pending, 2)
		require.Equal(t, "Ev1", pending[0].Key)
		require.JSONEq(t, `{"a":1}`, string(pending[0].Body))

		require.NoError(t, s.SlackInboxDone(ctx, pending[0].ID, ""))
		require.ErrorIs(t, s.SlackInboxDone(ctx, pending[0].ID, ""), store.ErrNotFound, "done once")

		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack", Tags: []string{"slack:C9:1.000001"}, Policy: "auto"})
		require.NoError(t, err)
		ev, err := s.SlackInboxAppendEvent(ctx, pending[1].ID, &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeUserMessage, Actor: "slack:U1", Payload: map[string]any{"text": "hi"}})
		require.NoError(t, err)
		require.Equal(t, transcript.TypeUserMessage, ev.Type)
		_, err = s.SlackInboxAppendEvent(ctx, pending[1].ID, &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeUserMessage})
		require.ErrorIs(t, err, store.ErrNotFound, "a processed delivery appends nothing more")
		got, err := s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, int64(1), got.EventCount)
		pending, err = s.SlackInboxPending(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, pending)
	})

	t.Run("SlackEventAppendOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack", Tags: []string{"slack:C9:1.000002"}, Policy: "auto"})
		require.NoError(t, err)
		line := func(text string) *store.EventAppendParams {
			return &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeUserMessage, Actor: "slack:U1", Payload: map[string]any{"text": text}}
		}
		for i, c := range []struct {
			id, text string
			added    bool
		}{{"Ev1", "status", true}, {"Ev1", "status", false}, {"Ev2", "status", true}, {"Ev1", "other", false}} {
			added, err := s.SlackEventAppendOnce(ctx, c.id, line(c.text))
			require.NoError(t, err)
			require.Equal(t, c.added, added, "case %d", i)
		}
		_, err = s.SlackEventAppendOnce(ctx, "", line("x"))
		require.Error(t, err)
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, map[string]any{"text": "status", "slackEventId": "Ev1"}, evs[0].Payload)
		require.Equal(t, "Ev2", evs[1].Payload["slackEventId"])
	})

	t.Run("SlackOutboxOrderPerQueue", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		msg := func(key, queue string) *store.SlackOutboxAddParams {
			return &store.SlackOutboxAddParams{DedupeKey: key, Queue: queue, Method: store.SlackPost, Channel: "C1", Text: key}
		}
		n, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{msg("a1", "C1:1"), msg("a2", "C1:1"), msg("b1", "C1:2"), msg("a1", "C1:1")})
		require.NoError(t, err)
		require.Equal(t, 3, n, "a repeated dedupe key is queued once")
		_, err = s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{{DedupeKey: "x"}})
		require.Error(t, err)

		now := time.Now()
		due, err := s.SlackOutboxDue(ctx, now, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"a1", "b1"}, keys(due), "one head per queue")

		require.NoError(t, s.SlackOutboxRetry(ctx, due[0].ID, now.Add(time.Hour), "rate limited"))
		due, err = s.SlackOutboxDue(ctx, now, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"b1"}, keys(due), "a retrying head holds back its queue")
		next, err := s.SlackOutboxNextDue(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, now, next, time.Second, "b1 is due now")

		due, err = s.SlackOutboxDue(ctx, now.Add(2*time.Hour), 10)
		require.NoError(t, err)
		require.Equal(t, []string{"a1", "b1"}, keys(due))
		require.Equal(t, 1, due[0].Attempts)
		require.Equal(t, "rate limited", due[0].LastError)

		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, "100.000001"))
		require.ErrorIs(t, s.SlackOutboxSent(ctx, due[0].ID, "100.000002"), store.ErrNotFound, "sent once")
		require.NoError(t, s.SlackOutboxFail(ctx, due[1].ID, "channel_not_found"))
		got, err := s.SlackOutboxGetByKey(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxSentSt, got.Status)
		require.Equal(t, "100.000001", got.SentTS)
		require.NotNil(t, got.SentAt)
		got, err = s.SlackOutboxGetByKey(ctx, "b1")
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxFailed, got.Status, "a failed message is kept")
		require.Equal(t, "channel_not_found", got.LastError)

		due, err = s.SlackOutboxDue(ctx, now.Add(2*time.Hour), 10)
		require.NoError(t, err)
		require.Equal(t, []string{"a2"}, keys(due))
		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, "100.000003"))
		_, err = s.SlackOutboxNextDue(ctx)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.SlackOutboxGetByKey(ctx, "missing")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SlackOutboxAttempt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{
			{DedupeKey: "p1", Queue: "C1:1", Method: store.SlackPost, Channel: "C1", ThreadTS: "1", Text: "p1"}})
		require.NoError(t, err)
		due, err := s.SlackOutboxDue(ctx, time.Now(), 10)
		require.NoError(t, err)
		require.Nil(t, due[0].AttemptedAt, "never attempted")

		before := time.Now()
		require.NoError(t, s.SlackOutboxAttempt(ctx, due[0].ID))
		due, err = s.SlackOutboxDue(ctx, time.Now(), 10)
		require.NoError(t, err)
		require.NotNil(t, due[0].AttemptedAt, "the attempt is on record before the post")
		first := *due[0].AttemptedAt
		require.WithinDuration(t, before, first, 5*time.Second)
		require.Zero(t, due[0].Attempts, "an attempt on record is not a failed attempt")

		// A failed attempt and the next one keep the first attempt's time:
		// the message may have reached Slack on any of them.
		require.NoError(t, s.SlackOutboxRetry(ctx, due[0].ID, time.Now(), "timeout"))
		require.NoError(t, s.SlackOutboxAttempt(ctx, due[0].ID))
		got, err := s.SlackOutboxGetByKey(ctx, "p1")
		require.NoError(t, err)
		require.NotNil(t, got.AttemptedAt)
		require.True(t, got.AttemptedAt.Equal(first), "the first attempt's time is kept")

		require.NoError(t, s.SlackOutboxSent(ctx, got.ID, "1.000002"))
		require.ErrorIs(t, s.SlackOutboxAttempt(ctx, got.ID), store.ErrNotFound, "a sent message is not attempted again")
		require.ErrorIs(t, s.SlackOutboxAttempt(ctx, 999999), store.ErrNotFound)
	})

	t.Run("SlackPrune", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: "old", Kind: store.SlackKindEvent, Body: []byte(`{}`)},
			{Key: "pending", Kind: store.SlackKindEvent, Body: []byte(`{}`)}})
		require.NoError(t, err)
		p, err := s.SlackInboxPending(ctx, 10)
		require.NoError(t, err)
		require.NoError(t, s.SlackInboxDone(ctx, p[0].ID, ""))
		msg := func(key string) *store.SlackOutboxAddParams {
			return &store.SlackOutboxAddParams{DedupeKey: key, Queue: "C1:" + key, Method: store.SlackPost, Channel: "C1", Text: key}
		}
		_, err = s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{msg("ev:1"), msg("card:hld_1:thread"), msg("ev:2"), msg("ev:3")})
		require.NoError(t, err)
		due, err := s.SlackOutboxDue(ctx, time.Now(), 10)
		require.NoError(t, err)
		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, "1.1"))
		require.NoError(t, s.SlackOutboxSent(ctx, due[1].ID, "1.2"))
		require.NoError(t, s.SlackOutboxFail(ctx, due[2].ID, "channel_not_found"))

		n, err := s.SlackPrune(ctx, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "nothing is old enough yet")
		n, err = s.SlackPrune(ctx, time.Now().Add(time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "the processed delivery and the sent message")

		p, err = s.SlackInboxPending(ctx, 10)
		require.NoError(t, err)
		require.Len(t, p, 1, "unprocessed deliveries stay")
		added, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: "pending", Kind: store.SlackKindEvent, Body: []byte(`{}`)}})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, added)
		for key, want := range map[string]bool{"ev:1": false, "card:hld_1:thread": true, "ev:2": true, "ev:3": true} {
			_, err := s.SlackOutboxGetByKey(ctx, key)
			if want {
				require.NoError(t, err, "%s is kept (a card, failed or pending)", key)
			} else {
				require.ErrorIs(t, err, store.ErrNotFound, key)
			}
		}
	})

	t.Run("SlackMirrorCursor", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		slackSes, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack", Tags: []string{"slack:C1:5.000001"}, Policy: "auto"})
		require.NoError(t, err)
		other, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Tags: []string{"slacker"}, Policy: "auto"})
		require.NoError(t, err)
		var ids []int64
		for i := range 3 {
			for _, ses := range []*store.Session{slackSes, other} {
				ev, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: transcript.TypeAssistantMessage, Payload: map[string]any{"text": fmt.Sprint(i)}})
				require.NoError(t, err)
				if ses == slackSes {
					ids = append(ids, ev.ID)
				}
			}
		}
		cur, err := s.SlackMirrorCursor(ctx)
		require.NoError(t, err)
		require.Zero(t, cur)
		evs, err := s.SlackMirrorEvents(ctx, 0, 2)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, ids[:2], []int64{evs[0].ID, evs[1].ID}, "only Slack sessions' events, in order")
		require.Equal(t, "slack:C1:5.000001", evs[0].Tag)
		require.Equal(t, "0", evs[0].Payload["text"])

		n, err := s.SlackMirrorAdvance(ctx, evs[1].ID, []*store.SlackOutboxAddParams{
			{DedupeKey: "ev1", Queue: "C1:5.000001", Method: store.SlackPost, Channel: "C1", ThreadTS: "5.000001", Text: "0"},
		})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		cur, err = s.SlackMirrorCursor(ctx)
		require.NoError(t, err)
		require.Equal(t, evs[1].ID, cur)
		_, err = s.SlackMirrorAdvance(ctx, evs[0].ID, nil)
		require.NoError(t, err)
		cur, err = s.SlackMirrorCursor(ctx)
		require.NoError(t, err)
		require.Equal(t, evs[1].ID, cur, "the cursor never moves back")

		_, err = s.SlackMirrorAdvance(ctx, ids[2], []*store.SlackOutboxAddParams{{DedupeKey: "bad"}})
		require.Error(t, err)
		cur, err = s.SlackMirrorCursor(ctx)
		require.NoError(t, err)
		require.Equal(t, evs[1].ID, cur, "a failed advance moves nothing")

		evs, err = s.SlackMirrorEvents(ctx, cur, 10)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, ids[2], evs[0].ID)
		got, err := s.SlackOutboxGetByKey(ctx, "ev1")
		require.NoError(t, err)
		require.Equal(t, "5.000001", got.ThreadTS)
	})
}

func keys(ms []*store.SlackOutboxMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.DedupeKey
	}
	return out
}
