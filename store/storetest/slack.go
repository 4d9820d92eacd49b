package storetest

import (
	"context"
	"fmt"
	"slices"
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
		due := outboxClaim(t, s, "r1", now)
		require.Equal(t, []string{"a1", "b1"}, keys(due), "one head per queue")

		require.NoError(t, s.SlackOutboxRetry(ctx, due[0].ID, due[0].Claim, now.Add(time.Hour), "rate limited"))
		require.NoError(t, s.SlackOutboxRelease(ctx, due[1].ID, due[1].Claim))
		due = outboxClaim(t, s, "r1", now)
		require.Equal(t, []string{"b1"}, keys(due), "a retrying head holds back its queue")
		require.NoError(t, s.SlackOutboxRelease(ctx, due[0].ID, due[0].Claim))
		next, err := s.SlackOutboxNextDue(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, now, next, time.Second, "b1 is due now")

		due = outboxClaim(t, s, "r1", now.Add(2*time.Hour))
		require.Equal(t, []string{"a1", "b1"}, keys(due))
		require.Equal(t, 1, due[0].Attempts)
		require.Equal(t, "rate limited", due[0].LastError)

		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, due[0].Claim, "100.000001"))
		require.ErrorIs(t, s.SlackOutboxSent(ctx, due[0].ID, due[0].Claim, "100.000002"), store.ErrConflict, "sent once")
		require.NoError(t, s.SlackOutboxFail(ctx, due[1].ID, due[1].Claim, "channel_not_found"))
		got, err := s.SlackOutboxGetByKey(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxSentSt, got.Status)
		require.Equal(t, "100.000001", got.SentTS)
		require.NotNil(t, got.SentAt)
		got, err = s.SlackOutboxGetByKey(ctx, "b1")
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxFailed, got.Status, "a failed message is kept")
		require.Equal(t, "channel_not_found", got.LastError)

		due = outboxClaim(t, s, "r1", now.Add(2*time.Hour))
		require.Equal(t, []string{"a2"}, keys(due))
		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, due[0].Claim, "100.000003"))
		_, err = s.SlackOutboxNextDue(ctx)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.SlackOutboxGetByKey(ctx, "missing")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	// Every field a message is queued with is what a claim and a lookup
	// give back.
	t.Run("SlackOutboxFields", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		want := store.SlackOutboxAddParams{DedupeKey: "r1", Queue: "respond:r1", Method: store.SlackRespond, Channel: "C1",
			ThreadTS: "1.5", User: "U1", Text: "hello", Blocks: `[{"type":"divider"}]`, RefKey: "ref",
			ResponseURL: "https://hooks.slack.com/commands/T1/2/abc", TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		_, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{&want})
		require.NoError(t, err)
		due := outboxClaim(t, s, "h1", time.Now())
		require.Len(t, due, 1)
		require.Equal(t, want, due[0].SlackOutboxAddParams)
		got, err := s.SlackOutboxGetByKey(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, want, got.SlackOutboxAddParams)
	})

	t.Run("SlackOutboxAttempt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{
			{DedupeKey: "p1", Queue: "C1:1", Method: store.SlackPost, Channel: "C1", ThreadTS: "1", Text: "p1"}})
		require.NoError(t, err)
		due := outboxClaim(t, s, "r1", time.Now())
		require.Nil(t, due[0].AttemptedAt, "never attempted")

		before := time.Now()
		require.NoError(t, s.SlackOutboxAttempt(ctx, due[0].ID, due[0].Claim))
		got, err := s.SlackOutboxGetByKey(ctx, "p1")
		require.NoError(t, err)
		require.NotNil(t, got.AttemptedAt, "the attempt is on record before the post")
		first := *got.AttemptedAt
		require.WithinDuration(t, before, first, 5*time.Second)
		require.Zero(t, got.Attempts, "an attempt on record is not a failed attempt")

		// A failed attempt and the next one keep the first attempt's time:
		// the message may have reached Slack on any of them.
		require.NoError(t, s.SlackOutboxRetry(ctx, due[0].ID, due[0].Claim, time.Now(), "timeout"))
		due = outboxClaim(t, s, "r1", time.Now())
		require.Len(t, due, 1)
		require.NotNil(t, due[0].AttemptedAt, "a claim carries the attempt on record")
		require.NoError(t, s.SlackOutboxAttempt(ctx, due[0].ID, due[0].Claim))
		got, err = s.SlackOutboxGetByKey(ctx, "p1")
		require.NoError(t, err)
		require.NotNil(t, got.AttemptedAt)
		require.True(t, got.AttemptedAt.Equal(first), "the first attempt's time is kept")

		require.NoError(t, s.SlackOutboxSent(ctx, got.ID, due[0].Claim, "1.000002"))
		require.ErrorIs(t, s.SlackOutboxAttempt(ctx, got.ID, due[0].Claim), store.ErrConflict, "a sent message is not attempted again")
		require.ErrorIs(t, s.SlackOutboxAttempt(ctx, 999999, due[0].Claim), store.ErrConflict)
	})

	t.Run("SlackOutboxClaim", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		msg := func(key, queue string) *store.SlackOutboxAddParams {
			return &store.SlackOutboxAddParams{DedupeKey: key, Queue: queue, Method: store.SlackPost, Channel: "C1", Text: key}
		}
		_, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{msg("a1", "C1:1"), msg("a2", "C1:1"), msg("b1", "C1:2")})
		require.NoError(t, err)
		now := time.Now()
		a := outboxClaim(t, s, "A", now)
		require.Equal(t, []string{"a1", "b1"}, keys(a))
		require.Equal(t, "A", a[0].Claim.Holder)
		require.NotNil(t, a[0].ClaimUntil)
		require.WithinDuration(t, now.Add(time.Minute), *a[0].ClaimUntil, time.Second)
		require.Empty(t, outboxClaim(t, s, "B", now), "held heads are refused, and a1's successor is not a head")
		next, err := s.SlackOutboxNextDue(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, now.Add(time.Minute), next, time.Second, "a held head is due when its claim lapses")

		// A sends a1: its successor becomes the head, claimable by anyone.
		require.NoError(t, s.SlackOutboxSent(ctx, a[0].ID, a[0].Claim, "1.1"))
		b := outboxClaim(t, s, "B", now)
		require.Equal(t, []string{"a2"}, keys(b), "the next message is claimable once its predecessor is sent")

		// A dies holding b1: after its claim lapses B takes it over, with
		// a claim of its own; A's late writes are refused (fencing).
		require.NoError(t, s.SlackOutboxAttempt(ctx, a[1].ID, a[1].Claim))
		require.Empty(t, outboxClaim(t, s, "B", now.Add(59*time.Second)), "not before the claim lapses")
		require.NoError(t, s.SlackOutboxExtend(ctx, a[1].ID, a[1].Claim, now.Add(70*time.Second)), "a send under way keeps its claim")
		require.Equal(t, []string{"a2"}, keys(outboxClaim(t, s, "B", now.Add(65*time.Second))), "b1's claim was extended")
		b = outboxClaim(t, s, "B", now.Add(71*time.Second))
		require.Equal(t, []string{"b1"}, keys(b), "taken over after the claim lapsed")
		require.NotNil(t, b[0].AttemptedAt, "the new holder sees A's attempt, so it looks the post up first")
		require.Greater(t, b[0].Claim.Seq, a[1].Claim.Seq)
		for name, err := range map[string]error{
			"attempt": s.SlackOutboxAttempt(ctx, a[1].ID, a[1].Claim),
			"sent":    s.SlackOutboxSent(ctx, a[1].ID, a[1].Claim, "1.2"),
			"retry":   s.SlackOutboxRetry(ctx, a[1].ID, a[1].Claim, now, "late"),
			"fail":    s.SlackOutboxFail(ctx, a[1].ID, a[1].Claim, "late"),
			"release": s.SlackOutboxRelease(ctx, a[1].ID, a[1].Claim),
			"extend":  s.SlackOutboxExtend(ctx, a[1].ID, a[1].Claim, now.Add(time.Hour)),
		} {
			require.ErrorIs(t, err, store.ErrConflict, "%s under a claim taken over", name)
		}
		require.NoError(t, s.SlackOutboxRelease(ctx, b[0].ID, b[0].Claim), "the new holder's own claim holds")
		got, err := s.SlackOutboxGetByKey(ctx, "b1")
		require.NoError(t, err)
		require.Equal(t, store.SlackOutboxPending, got.Status, "a late write recorded nothing")
		require.Zero(t, got.Attempts)

		// A claim that has lapsed by the store's clock starts no post, but
		// its outcome is still recorded while nobody has taken it over.
		past := time.Now().Add(-time.Hour)
		lapsed, err := s.SlackOutboxClaim(ctx, &store.SlackClaimParams{Holder: "C", Now: time.Now(), Until: past, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"b1"}, keys(lapsed), "a2 is still held by B")
		require.ErrorIs(t, s.SlackOutboxAttempt(ctx, lapsed[0].ID, lapsed[0].Claim), store.ErrConflict, "no post under a lapsed claim")
		require.NoError(t, s.SlackOutboxSent(ctx, lapsed[0].ID, lapsed[0].Claim, "1.3"))
	})

	t.Run("SlackClaimsAreExclusiveUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const queues = 40
		var msgs []*store.SlackOutboxAddParams
		var deliveries []*store.SlackInboxAddParams
		for q := range queues {
			for m := range 2 {
				msgs = append(msgs, &store.SlackOutboxAddParams{DedupeKey: fmt.Sprintf("q%d:m%d", q, m), Queue: fmt.Sprint("C1:", q),
					Method: store.SlackPost, Channel: "C1", Text: "x"})
				deliveries = append(deliveries, &store.SlackInboxAddParams{Key: fmt.Sprintf("q%d:d%d", q, m), Kind: store.SlackKindEvent,
					Body: []byte(`{}`), Thread: fmt.Sprint("C1:", q)})
			}
		}
		_, err := s.SlackOutboxAdd(ctx, msgs)
		require.NoError(t, err)
		_, err = s.SlackInboxAdd(ctx, deliveries)
		require.NoError(t, err)
		// Eight claimants at once, each claiming until nothing is left:
		// every queue's head and every thread's head is claimed by one of
		// them, once, and no second message of a queue while its head is held.
		type claimed struct{ outbox, inbox []string }
		results := make(chan claimed, 8)
		errs := make(chan error, 8)
		now := time.Now()
		for w := range 8 {
			go func() {
				var got claimed
				p := &store.SlackClaimParams{Holder: fmt.Sprint("w", w), Now: now, Until: now.Add(time.Minute), Limit: 3}
				for {
					out, err := s.SlackOutboxClaim(ctx, p)
					if err != nil {
						errs <- err
						return
					}
					in, err := s.SlackInboxClaim(ctx, p)
					if err != nil {
						errs <- err
						return
					}
					if len(out)+len(in) == 0 {
						results <- got
						return
					}
					got.outbox = append(got.outbox, keys(out)...)
					got.inbox = append(got.inbox, inboxKeys(in)...)
				}
			}()
		}
		var outbox, inbox []string
		for range 8 {
			select {
			case err := <-errs:
				require.NoError(t, err)
			case got := <-results:
				outbox, inbox = append(outbox, got.outbox...), append(inbox, got.inbox...)
			}
		}
		slices.Sort(outbox)
		slices.Sort(inbox)
		var wantOut, wantIn []string
		for q := range queues {
			wantOut, wantIn = append(wantOut, fmt.Sprintf("q%d:m0", q)), append(wantIn, fmt.Sprintf("q%d:d0", q))
		}
		slices.Sort(wantOut)
		slices.Sort(wantIn)
		require.Equal(t, wantOut, outbox, "each head claimed once, no successor while it is held")
		require.Equal(t, wantIn, inbox, "each thread's head claimed once, no successor while it is held")
	})

	// Not parallel: it times claims, best with the machine to itself.
	t.Run("SlackClaimCostIsFlatInBacklog", func(t *testing.T) { claimCostIsFlatInBacklog(t, newStore) })

	t.Run("SlackThreadNeverLosesItsHead", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// Each row arrives just as its thread's only other one, the head,
		// leaves pending: the arrival must see the head pending or become
		// the head itself, never neither, or the thread would wait forever.
		type queue struct {
			add func(i int) error
			// take claims the thread's head, if any, and answers its key
			// and how to take it out of pending.
			take func() (key string, finish func() error)
		}
		for name, q := range map[string]queue{
			"inbox": {
				add: func(i int) error {
					_, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: fmt.Sprint("d", i), Kind: store.SlackKindEvent,
						Body: []byte(`{}`), Thread: "C1:1"}})
					return err
				},
				take: func() (string, func() error) {
					got := inboxClaim(t, s, "r1", time.Now())
					require.LessOrEqual(t, len(got), 1, "one head per thread")
					if len(got) == 0 {
						return "", nil
					}
					return got[0].Key, func() error { return s.SlackInboxDone(ctx, got[0].ID, "") }
				},
			},
			"outbox": {
				add: func(i int) error {
					_, err := s.SlackOutboxAdd(ctx, []*store.SlackOutboxAddParams{{DedupeKey: fmt.Sprint("d", i), Queue: "C1:1",
						Method: store.SlackPost, Channel: "C1", Text: "x"}})
					return err
				},
				take: func() (string, func() error) {
					got := outboxClaim(t, s, "r1", time.Now())
					require.LessOrEqual(t, len(got), 1, "one head per queue")
					if len(got) == 0 {
						return "", nil
					}
					return got[0].DedupeKey, func() error { return s.SlackOutboxSent(ctx, got[0].ID, got[0].Claim, "1.0") }
				},
			},
		} {
			const n = 100
			require.NoError(t, q.add(0))
			next, added := make(chan struct{}), make(chan error, 1)
			go func() {
				for i := 1; i < n; i++ {
					<-next
					if err := q.add(i); err != nil {
						added <- err
						return
					}
				}
				added <- nil
			}()
			for i := range n {
				key, finish := q.take()
				for deadline := time.Now().Add(10 * time.Second); finish == nil; key, finish = q.take() {
					require.True(t, time.Now().Before(deadline), "%s: the thread stalled at row %d of %d", name, i, n)
				}
				require.Equal(t, fmt.Sprint("d", i), key, "%s: in arrival order", name)
				if i < n-1 {
					next <- struct{}{}
				}
				require.NoError(t, finish())
			}
			require.NoError(t, <-added)
		}
	})

	t.Run("SlackInboxClaim", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		add := func(key, thread string) {
			added, err := s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: key, Kind: store.SlackKindEvent, Body: []byte(`{}`), Thread: thread}})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, added)
		}
		add("t1a", "C1:1")
		add("t2a", "C1:2")
		add("t1b", "C1:1")
		add("own1", "")
		add("own2", "")
		now := time.Now()
		a := inboxClaim(t, s, "A", now)
		require.Equal(t, []string{"t1a", "t2a", "own1", "own2"}, inboxKeys(a), "each thread's head; a delivery without a thread is its own")
		require.Equal(t, "C1:1", a[0].Thread)
		require.Empty(t, inboxClaim(t, s, "B", now), "held heads are refused, and t1b waits behind t1a")

		require.NoError(t, s.SlackInboxDone(ctx, a[0].ID, ""))
		b := inboxClaim(t, s, "B", now)
		require.Equal(t, []string{"t1b"}, inboxKeys(b), "the thread's next delivery once its head is done")

		// A long handling keeps its claim by extending it.
		require.NoError(t, s.SlackInboxExtend(ctx, a[1].ID, a[1].Claim, now.Add(10*time.Minute)))
		// A released delivery waits for its retry time; a failed attempt is counted.
		require.NoError(t, s.SlackInboxRelease(ctx, &store.SlackInboxReleaseParams{ID: a[2].ID, Claim: a[2].Claim,
			Next: now.Add(30 * time.Second), Failed: true, Error: "database busy"}))
		require.NoError(t, s.SlackInboxRelease(ctx, &store.SlackInboxReleaseParams{ID: a[3].ID, Claim: a[3].Claim, Next: now}))
		b = inboxClaim(t, s, "B", now)
		require.Equal(t, []string{"own2"}, inboxKeys(b), "released now: claimable; a retry waits for its time")
		require.Zero(t, b[0].Attempts, "a release that did not fail counts nothing")

		// After a minute A's claims have lapsed except the extended one.
		b = inboxClaim(t, s, "B", now.Add(2*time.Minute))
		require.Equal(t, []string{"t1b", "own1", "own2"}, inboxKeys(b))
		require.Equal(t, 1, b[1].Attempts)
		require.Equal(t, "C1:1", b[0].Thread)
		for name, err := range map[string]error{
			"extend":  s.SlackInboxExtend(ctx, a[2].ID, a[2].Claim, now.Add(time.Hour)),
			"release": s.SlackInboxRelease(ctx, &store.SlackInboxReleaseParams{ID: a[2].ID, Claim: a[2].Claim, Next: now}),
		} {
			require.ErrorIs(t, err, store.ErrConflict, "%s under a claim taken over", name)
		}
		require.Equal(t, []string{"t1b", "own1", "own2"}, inboxKeys(inboxClaim(t, s, "C", now.Add(9*time.Minute))),
			"B's lapsed claims, not t2a's extended one")
		c := inboxClaim(t, s, "C", now.Add(11*time.Minute))
		require.Equal(t, "t2a", c[0].Key, "lapsed at last")
		require.NoError(t, s.SlackInboxDone(ctx, c[0].ID, ""))
		require.ErrorIs(t, s.SlackInboxExtend(ctx, c[0].ID, c[0].Claim, now.Add(time.Hour)), store.ErrConflict, "a processed delivery holds no claim")
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
		due := outboxClaim(t, s, "r1", time.Now())
		require.NoError(t, s.SlackOutboxSent(ctx, due[0].ID, due[0].Claim, "1.1"))
		require.NoError(t, s.SlackOutboxSent(ctx, due[1].ID, due[1].Claim, "1.2"))
		require.NoError(t, s.SlackOutboxFail(ctx, due[2].ID, due[2].Claim, "channel_not_found"))

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

// outboxClaim claims due queue heads for holder as of now, for a minute.
func outboxClaim(t *testing.T, s store.Store, holder string, now time.Time) []*store.SlackOutboxMsg {
	t.Helper()
	due, err := s.SlackOutboxClaim(context.Background(), &store.SlackClaimParams{Holder: holder, Now: now, Until: now.Add(time.Minute), Limit: 10})
	require.NoError(t, err)
	return due
}

// inboxClaim claims thread heads of the inbox for holder as of now, for a minute.
func inboxClaim(t *testing.T, s store.Store, holder string, now time.Time) []*store.SlackInboxItem {
	t.Helper()
	got, err := s.SlackInboxClaim(context.Background(), &store.SlackClaimParams{Holder: holder, Now: now, Until: now.Add(time.Minute), Limit: 10})
	require.NoError(t, err)
	return got
}

func inboxKeys(its []*store.SlackInboxItem) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.Key
	}
	return out
}

func keys(ms []*store.SlackOutboxMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.DedupeKey
	}
	return out
}
