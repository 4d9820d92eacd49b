package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// runEngine is the engine's part of the suite: the queue, runs and holds.
func runEngine(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	workflow := func(t *testing.T, s store.Store) string {
		t.Helper()
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "W", Body: "w", MemoType: store.MemoTypeWorkflow,
			Workflow: &store.WorkflowIndex{Command: "/w", Status: "live"}})
		require.NoError(t, err)
		return m.ID
	}
	enqueue := func(t *testing.T, s store.Store, wf, key string) *store.QueueItem {
		t.Helper()
		it, created, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
			Command: "/w", DedupeKey: key, Payload: map[string]any{"k": key},
			NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}})
		require.NoError(t, err)
		require.True(t, created)
		return it
	}
	claimOne := func(t *testing.T, s store.Store, runner string) *store.Run {
		t.Helper()
		runs := claim(t, s, runner, 1)
		require.Len(t, runs, 1)
		return runs[0]
	}

	t.Run("QueueInsertIsIdempotent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		it := enqueue(t, s, wf, "k")
		require.Equal(t, store.ItemPending, it.Status)
		require.NotEmpty(t, it.SessionID)
		ses, err := s.SessionGetByTag(ctx, "workflow:"+it.ID)
		require.NoError(t, err, "the minted session is tagged with the item")
		require.Equal(t, it.SessionID, ses.ID)

		again, created, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
			Command: "/w", DedupeKey: "k", NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow}})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, it.ID, again.ID)
		n, err := s.QueueItemCountPending(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		heads, err := s.QueueItemListPending(ctx, 5)
		require.NoError(t, err)
		require.Equal(t, []*store.QueueItemHead{{ID: it.ID, Command: "/w", DedupeKey: "k"}}, heads,
			"a head names its dedupe key, which the run_started line carries")
		_, err = s.QueueItemGetByID(ctx, "itm_missing")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	// Claim on enqueue: the item is written claimed with its run and first
	// events in one transaction, and that run is like any claimed one —
	// fenced, settled once, recovered when its runner dies — while a repeat
	// of the dedupe key claims nothing and nothing is left pending.
	t.Run("InsertClaimedIsARunLikeAnyOther", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		var woken atomic.Int64
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		notices := s.WorkSubscribe(wctx)
		go func() {
			for w := range notices {
				if w.Kind == store.WorkQueued {
					woken.Add(1)
				}
			}
		}()
		insert := func(key string) (*store.QueueItem, *store.Run, bool, error) {
			id := store.NewID("itm")
			return s.QueueItemInsertClaimed(ctx, &store.QueueItemInsertParams{ID: id, WorkflowMemoID: wf, Command: "/w",
				DedupeKey: key, Payload: map[string]any{"k": key}, NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}},
				&store.ItemInsertClaim{RunID: store.RunIDForItem(id), RunnerID: "a", Now: time.Now(),
					Events: []store.EventAppendParams{{Type: transcript.TypeRunStarted, Actor: "engine", Payload: map[string]any{"itemId": id}}}})
		}
		it, r, created, err := insert("k")
		require.NoError(t, err)
		require.True(t, created)
		require.NotNil(t, r)
		require.Equal(t, []string{store.ItemClaimed, r.ID}, []string{it.Status, it.RunID})
		require.Equal(t, store.RunIDForItem(it.ID), r.ID)
		require.Equal(t, []any{store.RunRunning, int64(1), "a", it.SessionID, it.ID, "/w", "k"},
			[]any{r.Status, r.Lease, r.RunnerID, r.SessionID, r.ItemID, r.Command, r.Payload["k"]})

		stored, err := s.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, []string{store.ItemClaimed, r.ID}, []string{stored.Status, stored.RunID}, "claimed as written")
		require.NotNil(t, stored.ClaimedAt)
		got, err := s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, []any{store.RunRunning, int64(1), "a"}, []any{got.Status, got.Lease, got.RunnerID})
		ses, err := s.SessionGetByTag(ctx, "workflow:"+it.ID)
		require.NoError(t, err, "the minted session is tagged with the item")
		require.Equal(t, it.SessionID, ses.ID)
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Limit: 10})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, transcript.TypeRunStarted, evs[0].Type, "the run's first line is written with it")
		n, err := s.QueueItemCountPending(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing is left for a claim")
		require.Empty(t, claim(t, s, "b", 5), "no claim can make a second run")

		again, r2, created, err := insert("k")
		require.NoError(t, err)
		require.False(t, created)
		require.Nil(t, r2, "a repeat claims nothing")
		require.Equal(t, it.ID, again.ID)

		_, _, _, err = s.QueueItemInsertClaimed(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
			Command: "/w", DedupeKey: "other"}, &store.ItemInsertClaim{RunID: store.NewID("run"), RunnerID: "a"})
		require.ErrorIs(t, err, store.ErrInvalid, "a run id must derive from its item")
		_, err = s.QueueItemGetByID(ctx, "itm_missing")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, woken.Load(), "a claimed item wakes no runner: nothing is pending")

		// Fenced like a claimed run, and recovered when its runner dies.
		require.ErrorIs(t, s.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease + 1}), store.ErrLeaseLost)
		later := time.Now().Add(time.Hour)
		stuck, err := s.RunListStuck(ctx, later, 5)
		require.NoError(t, err)
		require.Len(t, stuck, 1)
		rec, _, err := s.RunRescueMany(ctx, &store.RunRescueParams{RunnerID: "b", StaleBefore: later,
			Recover: []store.RunLease{{ID: r.ID, Lease: stuck[0].Lease}}})
		require.NoError(t, err)
		require.Len(t, rec, 1)
		_, err = s.RunHeartbeat(ctx, r.ID, r.Lease, time.Now())
		require.ErrorIs(t, err, store.ErrLeaseLost, "the dead runner's lease is fenced off")
		settled, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: rec[0].Lease, Status: store.RunSucceeded})
		require.NoError(t, err)
		require.Equal(t, store.RunSucceeded, settled.Status)
		stored, err = s.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, store.ItemDone, stored.Status)
	})

	// A write refused by a statement late in its transaction (here the
	// minted session's tag, which another session holds; PostgreSQL sends
	// it pipelined with the run's row) leaves nothing of it: no item, no
	// run, no line in the holder's transcript, and the refusal is the tag's.
	t.Run("InsertClaimedRefusedLateWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		holder, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Tags: []string{"held"}})
		require.NoError(t, err)
		id := store.NewID("itm")
		_, _, _, err = s.QueueItemInsertClaimed(ctx, &store.QueueItemInsertParams{ID: id, WorkflowMemoID: wf, Command: "/w",
			DedupeKey: "k", NewSession: &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto", Tags: []string{"held"}}},
			&store.ItemInsertClaim{RunID: store.RunIDForItem(id), RunnerID: "a", Now: time.Now(),
				Events: []store.EventAppendParams{{Type: transcript.TypeRunStarted, Actor: "engine"}}})
		require.ErrorIs(t, err, store.ErrConflict)
		require.ErrorContains(t, err, "belongs to another session")
		_, err = s.QueueItemGetByID(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, "the item is rolled back with the session")
		_, err = s.RunGetByID(ctx, store.RunIDForItem(id))
		require.ErrorIs(t, err, store.ErrNotFound, "and so is its run")
		got, err := s.SessionGetByTag(ctx, "held")
		require.NoError(t, err)
		require.Equal(t, holder.ID, got.ID)
		require.Zero(t, got.EventCount)
		// The same key is free: nothing of the refused write holds it.
		_, created, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
			Command: "/w", DedupeKey: "k"})
		require.NoError(t, err)
		require.True(t, created)
	})

	// The text filter searches what people search: a session the engine
	// minted is found by "workflow" and by its own title and tags, not by
	// the random item id in its workflow:<item id> tag (which resolves it
	// exactly, by tag).
	t.Run("MintedItemTagsAreNotSearchText", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		id := store.NewID("itm")
		it, _, _, err := s.QueueItemInsertClaimed(ctx, &store.QueueItemInsertParams{ID: id, WorkflowMemoID: wf, Command: "/w",
			DedupeKey: "k", NewSession: &store.SessionCreateParams{Title: "Weekly otters", Origin: store.OriginWorkflow, Policy: "auto",
				Tags: []string{"brief:otters"}}},
			&store.ItemInsertClaim{RunID: store.RunIDForItem(id), RunnerID: "a",
				Events: []store.EventAppendParams{{Type: transcript.TypeRunStarted, Actor: "engine"}}})
		require.NoError(t, err)
		ses, err := s.SessionGetByTag(ctx, "workflow:"+id)
		require.NoError(t, err)
		require.Equal(t, it.SessionID, ses.ID)
		for _, tc := range []struct {
			q     string
			found bool
		}{
			{"workflow", true}, {"WORKFLOW:", true}, {"weekly otters", true}, {"brief:otters", true}, {"otters", true},
			{id, false}, {"workflow:" + id, false}, {id[4:10], false}, {"itm_", false},
		} {
			page, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginWorkflow}, Query: tc.q})
			require.NoError(t, err, tc.q)
			if tc.found {
				require.Len(t, page, 1, tc.q)
				require.Equal(t, ses.ID, page[0].ID, tc.q)
			} else {
				require.Empty(t, page, tc.q)
			}
		}
	})

	t.Run("ConcurrentClaimsNeverOverlap", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		const n = 60
		for i := range n {
			enqueue(t, s, wf, fmt.Sprint(i))
		}
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
			errs = make([]error, 4)
		)
		for w := range errs {
			wg.Go(func() {
				for {
					// Every worker reads the same heads and races to claim them.
					pending, err := s.QueueItemListPending(ctx, 3)
					if err != nil || len(pending) == 0 {
						errs[w] = err
						return
					}
					runs, err := s.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: fmt.Sprint(w), Claims: claims(pending)})
					if err != nil {
						errs[w] = err
						return
					}
					mu.Lock()
					for _, r := range runs {
						seen[r.ItemID]++
						if r.ID != store.RunIDForItem(r.ItemID) {
							errs[w] = fmt.Errorf("run %s does not derive from item %s", r.ID, r.ItemID)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, seen, n)
		for id, c := range seen {
			require.Equal(t, 1, c, "item %s claimed twice", id)
		}
		counts, err := s.QueueItemCountByStatus(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(n), counts[store.ItemClaimed])
		require.Zero(t, counts[store.ItemPending])
	})

	// SPEC §4.2: any number of pending items may share a session and be
	// claimed in one pass; their transcript lines keep a strict order and no
	// uniqueness collision may stop the claim.
	t.Run("ClaimManyItemsOfOneSession", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name                        string
			shared, alone, eventsPerRun int
		}{
			{name: "TwoSharedOneEvent", shared: 2, eventsPerRun: 1},
			{name: "ThreeSharedAndOneAlone", shared: 3, alone: 1, eventsPerRun: 1},
			{name: "SeveralEventsPerRun", shared: 4, alone: 2, eventsPerRun: 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s := newStore(t)
				wf := workflow(t, s)
				ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto",
					Events: []*store.EventAppendParams{{Type: transcript.TypeUserMessage, Actor: "ada"}}})
				require.NoError(t, err)
				for i := range tc.shared {
					_, created, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
						Command: "/w", DedupeKey: fmt.Sprint("shared-", i), SessionID: ses.ID})
					require.NoError(t, err)
					require.True(t, created)
				}
				for i := range tc.alone {
					enqueue(t, s, wf, fmt.Sprint("alone-", i))
				}
				n := tc.shared + tc.alone
				pending, err := s.QueueItemListPending(ctx, n)
				require.NoError(t, err)
				cs := claims(pending)
				for c := range cs {
					runID := store.RunIDForItem(cs[c].ItemID)
					for i := range tc.eventsPerRun {
						cs[c].Events = append(cs[c].Events, store.EventAppendParams{Type: transcript.TypeRunStarted, Actor: "engine",
							Payload: map[string]any{"runId": runID, "n": float64(i)}})
					}
				}
				runs, err := s.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: "a", Claims: cs})
				require.NoError(t, err, "one pass claims every item, however many share a session")
				require.Len(t, runs, n)
				left, err := s.QueueItemCountPending(ctx)
				require.NoError(t, err)
				require.Zero(t, left)

				evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Limit: 1000})
				require.NoError(t, err)
				require.Len(t, evs, 1+tc.shared*tc.eventsPerRun)
				for i := 1; i < len(evs); i++ {
					require.True(t, evs[i].TS.After(evs[i-1].TS), "ts strictly increases: %s then %s", evs[i-1].TS, evs[i].TS)
					require.Greater(t, evs[i].ID, evs[i-1].ID, "ts order is append order")
				}
				var want []string
				for _, r := range runs {
					if r.SessionID != ses.ID {
						continue
					}
					for i := range tc.eventsPerRun {
						want = append(want, fmt.Sprint(r.ID, "/", i))
					}
				}
				var got []string
				for _, ev := range evs[1:] {
					got = append(got, fmt.Sprint(ev.Payload["runId"], "/", ev.Payload["n"]))
				}
				require.Equal(t, want, got, "each run's lines stay together, in claim order")
				after, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: evs[0].TS, Limit: 1000})
				require.NoError(t, err)
				require.Len(t, after, len(evs)-1, "after-polling sees every line once")
				got2, err := s.SessionGetByID(ctx, ses.ID)
				require.NoError(t, err)
				require.Equal(t, int64(len(evs)), got2.EventCount)
				require.Equal(t, evs[len(evs)-1].TS, got2.LastActiveAt)
			})
		}
	})

	// Every write that appends several lines to one session, alone or
	// beside other writers in one commit, keeps the session's ts strictly
	// increasing.
	t.Run("MultiEventWritesKeepStrictOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		three := func(kind string) []*store.EventAppendParams {
			return []*store.EventAppendParams{{Type: kind, Actor: "a"}, {Type: kind, Actor: "b"}, {Type: kind, Actor: "c"}}
		}
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: "auto", Events: three("context")})
		require.NoError(t, err)
		it, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf,
			Command: "/w", DedupeKey: "k", SessionID: ses.ID})
		require.NoError(t, err)
		runs := claim(t, s, "a", 1)
		require.Len(t, runs, 1)
		r := runs[0]
		lines := func(kind string) []store.EventAppendParams {
			return []store.EventAppendParams{{Type: kind}, {Type: kind}, {Type: store.EventPolicySet, Payload: map[string]any{"policy": "auto"}}, {Type: kind}}
		}
		// Several writers at once, so the store may run them in one commit.
		const writers = 6
		errs := make(chan error, writers+2)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, Events: three(fmt.Sprint("update_", i))})
				errs <- err
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease, Events: lines(transcript.TypeRunStep)})
		}()
		wg.Wait()
		_, err = s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Events: lines(transcript.TypeRunFinished)})
		errs <- err
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, evs, 3+writers*3+4+4)
		for i := 1; i < len(evs); i++ {
			require.True(t, evs[i].TS.After(evs[i-1].TS), "ts strictly increases: %s then %s", evs[i-1].TS, evs[i].TS)
		}
		got, err := s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, int64(len(evs)), got.EventCount)
		require.Equal(t, it.SessionID, ses.ID)
	})

	t.Run("RunWritesAreFencedAndDispatchIsAtomic", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		it := enqueue(t, s, wf, "k")
		r := claimOne(t, s, "a")
		err := s.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease + 1})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.NoError(t, s.RunCheckpoint(ctx, &store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease,
			Manifest: json.RawMessage(`{"title":"W"}`), Steps: []store.RunStep{{Kind: "context", Status: "succeeded"}},
			Events: []store.EventAppendParams{{Type: transcript.TypeRunStep, Actor: "engine"}}}))

		stub, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stub", Body: "stub"})
		require.NoError(t, err)
		body := "new"
		_, err = s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{Update: &store.MemoUpdateParams{ID: stub.ID, ExpectedVersion: 7, Body: &body}}})
		require.ErrorIs(t, err, store.ErrConflict, "a stale stub version refuses the dispatch")
		got, err := s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunRunning, got.Status, "and nothing of the settle is written")

		memoID := store.NewID("mem")
		settled, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{MemoID: memoID, Create: &store.MemoCreateParams{Title: "Out", Body: "out", Unlisted: true}},
			Events:   []store.EventAppendParams{{Type: transcript.TypeMemoDispatched, Actor: "engine", Payload: map[string]any{"memoId": memoID}}}})
		require.NoError(t, err)
		require.Equal(t, memoID, settled.DispatchMemoID, "the memo gets the id the caller minted")
		m, err := s.MemoGetByID(ctx, settled.DispatchMemoID)
		require.NoError(t, err)
		require.Equal(t, "Out", m.Title)
		_, err = s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{MemoID: store.NewID("mem"), Create: &store.MemoCreateParams{Title: "Twice", Body: "x"}}})
		require.ErrorIs(t, err, store.ErrLeaseLost, "a run settles once")
		got, err = s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunSucceeded, got.Status)
		require.Equal(t, `{"title":"W"}`, string(got.Manifest))
		item, err := s.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, store.ItemDone, item.Status)
		require.NotNil(t, item.SettledAt)
		ses, err := s.SessionGetByID(ctx, it.SessionID)
		require.NoError(t, err)
		require.Equal(t, int64(2), ses.EventCount)
	})

	// SPEC §9: work committed by one process wakes the runners of every
	// process sharing the store (on SQLite, the one process).
	t.Run("WorkSubscribe", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		notices := s.WorkSubscribe(subCtx)
		waitFor := func(kind string) store.WorkNotice {
			t.Helper()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case w := <-notices:
					if w.Kind == kind {
						return w
					}
				case <-deadline:
					t.Fatalf("no %s notice", kind)
				}
			}
		}
		wf := workflow(t, s)
		enqueue(t, s, wf, "a")
		waitFor(store.WorkQueued)

		r := claimOne(t, s, "a")
		require.NoError(t, s.RunCancelRequest(ctx, []string{r.ID}, "ada"))
		w := waitFor(store.WorkCancel)
		require.Equal(t, []string{r.ID}, w.RunIDs)
		require.Equal(t, "ada", w.Reason)

		h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), Command: "/w", GateLabel: "Check", Output: "out"}})
		require.NoError(t, err)
		_, err = s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: h.ID, Status: store.HoldApproved, DecidedBy: "ada", DecidedVia: "api",
			Approvals: []store.HoldApproval{{By: "ada", Key: "user:u1"}}, RunDecision: "approved",
			Audit: store.HoldDecision{HoldID: h.ID, RunID: r.ID, Decision: "approve", DecidedBy: "ada", Outcome: store.AttemptAccepted}})
		require.NoError(t, err)
		waitFor(store.WorkResumable)

		// A chat turn's cancel request is a cancel notice too, naming the
		// turn: the process answering it stops at once rather than at its
		// next turn heartbeat (a second, by default).
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginUser, Policy: store.PolicyAuto})
		require.NoError(t, err)
		turn, running := "turn_1", store.SessionRunning
		_, _, err = s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, ActiveRunID: &turn, Status: &running})
		require.NoError(t, err)
		require.NoError(t, s.SessionTurnCancel(ctx, ses.ID, "turn_1", "ada"))
		w = waitFor(store.WorkCancel)
		require.Equal(t, []string{"turn_1"}, w.RunIDs)
		require.Equal(t, "ada", w.Reason)
	})

	t.Run("HoldDecideIsACompareAndSet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		enqueue(t, s, wf, "k")
		r := claimOne(t, s, "a")
		h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), SessionID: r.SessionID, Command: "/w", GateLabel: "Check", Output: "out", RequiredApprovals: 2}})
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, h.Status)
		open, err := s.HoldCountOpen(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), open)
		counted, err := s.SessionGetByID(ctx, r.SessionID)
		require.NoError(t, err)
		require.Equal(t, int64(1), counted.OpenHolds, "the read surfaces show counts the open hold")
		bare, err := s.SessionGetBare(ctx, r.SessionID)
		require.NoError(t, err)
		require.Zero(t, bare.OpenHolds, "the bare read counts nothing")
		bare.OpenHolds = counted.OpenHolds
		require.Equal(t, counted, bare, "and reads the same row")
		_, err = s.SessionGetBare(ctx, "ses_missing")
		require.ErrorIs(t, err, store.ErrNotFound)

		ada := store.HoldApproval{By: "ada", Key: "user:u1", Via: "console", At: time.Now().UTC().Truncate(time.Second)}
		partial := &store.HoldDecideParams{HoldID: h.ID, ExpectApprovals: 0, Status: store.HoldOpen, Approvals: []store.HoldApproval{ada},
			Events: []store.EventAppendParams{{Type: transcript.TypeHoldApprovedPartial, Actor: "engine", Payload: map[string]any{"approvals": 1}}},
			Audit:  store.HoldDecision{HoldID: h.ID, RunID: r.ID, Decision: "approve", DecidedBy: "ada", Via: "console", Outcome: store.AttemptAccepted}}
		h, err = s.HoldDecide(ctx, partial)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, h.Status)
		require.Len(t, h.Approvals, 1)
		require.Equal(t, "user:u1", h.Approvals[0].Key, "the approver's key is kept, so the engine can count people")
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: r.SessionID, Types: []string{transcript.TypeHoldApprovedPartial}})
		require.NoError(t, err)
		require.Len(t, evs, 1, "the events are written with the decision")

		_, err = s.HoldDecide(ctx, partial)
		require.ErrorIs(t, err, store.ErrConflict, "a decision made from a stale read is refused")
		resumable, err := s.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: "b", Limit: 5})
		require.NoError(t, err)
		require.Empty(t, resumable, "an open hold resumes nothing")

		edited := "edited"
		bob := store.HoldApproval{By: "bob", Key: "user:u2", Via: "slack"}
		h, err = s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: h.ID, ExpectApprovals: 1, Status: store.HoldApproved,
			Approvals: []store.HoldApproval{ada, bob}, DecidedBy: "bob", DecidedVia: "slack", EditedOutput: &edited, RunDecision: "approved",
			Audit: store.HoldDecision{HoldID: h.ID, RunID: r.ID, Decision: "approve", DecidedBy: "bob", Via: "slack", Outcome: store.AttemptAccepted}})
		require.NoError(t, err)
		require.Equal(t, []string{store.HoldApproved, "bob", "slack"}, []string{h.Status, h.DecidedBy, h.DecidedVia})
		require.NotNil(t, h.DecidedAt)
		require.Len(t, h.Approvals, 2)
		_, err = s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: h.ID, ExpectApprovals: 2, Status: store.HoldRejected, RunDecision: "rejected",
			Audit: store.HoldDecision{HoldID: h.ID, RunID: r.ID, Decision: "reject", DecidedBy: "cy", Outcome: store.AttemptAccepted}})
		require.ErrorIs(t, err, store.ErrConflict, "a decided hold is decided once")

		resumable, err = s.RunResumeApproved(ctx, &store.RunAcquireParams{RunnerID: "b", Limit: 5})
		require.NoError(t, err)
		require.Len(t, resumable, 1)
		require.Equal(t, "approved", resumable[0].Decision)
		require.Equal(t, "edited", *resumable[0].DecidedOutput)
		require.Greater(t, resumable[0].Lease, r.Lease)
		audit, err := s.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		require.Len(t, audit, 2, "refused writes leave no audit row; the engine audits conflicts itself")
	})

	t.Run("HoldRejectionSettlesTheRun", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		it := enqueue(t, s, wf, "k")
		r := claimOne(t, s, "a")
		h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
			Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), Command: "/w", Output: "out", RequiredApprovals: 1}})
		require.NoError(t, err)
		_, err = s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: h.ID, Status: store.HoldRejected, DecidedBy: "ada", DecidedVia: "api",
			Comment: "no", RunDecision: "rejected",
			Outcome: &store.RunOutcome{Status: store.RunCancelled, ItemStatus: store.ItemFailed, ErrorKind: "cancelled", Error: "rejected by ada: no"},
			Audit:   store.HoldDecision{HoldID: h.ID, RunID: r.ID, Decision: "reject", DecidedBy: "ada", Outcome: store.AttemptAccepted}})
		require.NoError(t, err)
		got, err := s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, []string{store.RunCancelled, "cancelled", "rejected by ada: no", "rejected"},
			[]string{got.Status, got.ErrorKind, got.Error, got.Decision})
		item, err := s.QueueItemGetByID(ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, store.ItemFailed, item.Status)
	})

	t.Run("RecoveryIsBounded", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		enqueue(t, s, wf, "k")
		r := claimOne(t, s, "dead")
		later := time.Now().Add(time.Hour)
		stuck, err := s.RunListStuck(ctx, time.Now().Add(-time.Hour), 5)
		require.NoError(t, err)
		require.Empty(t, stuck, "a fresh heartbeat is not stuck")
		stuck, err = s.RunListStuck(ctx, later, 5)
		require.NoError(t, err)
		require.Len(t, stuck, 1)
		lease := store.RunLease{ID: r.ID, Lease: stuck[0].Lease}
		rec, _, err := s.RunRescueMany(ctx, &store.RunRescueParams{RunnerID: "b", StaleBefore: later, Recover: []store.RunLease{lease}})
		require.NoError(t, err)
		require.Len(t, rec, 1)
		require.Equal(t, 1, rec[0].RecoveryAttempts)
		require.Equal(t, "b", rec[0].RunnerID)
		_, err = s.RunHeartbeat(ctx, r.ID, r.Lease, time.Now())
		require.ErrorIs(t, err, store.ErrLeaseLost, "the old lease is fenced off")
		rec, ex, err := s.RunRescueMany(ctx, &store.RunRescueParams{RunnerID: "c", StaleBefore: later, Recover: []store.RunLease{lease}})
		require.NoError(t, err)
		require.Empty(t, rec, "a verdict on a stale read is skipped")
		require.Empty(t, ex)
		out := store.RunOutcome{Status: store.RunRecoveryExhausted, ItemStatus: store.ItemFailed, ErrorKind: store.RunRecoveryExhausted, Error: "gave up"}
		_, ex, err = s.RunRescueMany(ctx, &store.RunRescueParams{RunnerID: "c", StaleBefore: later,
			Exhaust: []store.RunExhaust{{RunLease: store.RunLease{ID: r.ID, Lease: leaseOf(t, s, r.ID)}, Outcome: out,
				Events: []store.EventAppendParams{{Type: transcript.TypeRunFinished, Actor: "engine"}}}}})
		require.NoError(t, err)
		require.Len(t, ex, 1)
		require.Equal(t, []string{store.RunRecoveryExhausted, "gave up"}, []string{ex[0].Status, ex[0].Error})
		counts, err := s.RunCountByStatus(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), counts[store.RunRecoveryExhausted])
	})

	t.Run("CancelRequestReachesTheHeartbeat", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		enqueue(t, s, wf, "k")
		r := claimOne(t, s, "a")
		cancel, err := s.RunHeartbeat(ctx, r.ID, r.Lease, time.Now())
		require.NoError(t, err)
		require.Empty(t, cancel)
		require.NoError(t, s.RunCancelRequest(ctx, []string{r.ID}, "cancelled by ada"))
		require.NoError(t, s.RunCancelRequest(ctx, []string{r.ID}, "cancelled by bob"), "a second request keeps the first")
		cancel, err = s.RunHeartbeat(ctx, r.ID, r.Lease, time.Now())
		require.NoError(t, err)
		require.Equal(t, "cancelled by ada", cancel)
	})

	t.Run("RunsAndHoldsPageByKeyset", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflow(t, s)
		const n = 7
		for i := range n {
			enqueue(t, s, wf, fmt.Sprint(i))
		}
		// One claim makes every run in one transaction: equal creation
		// times, so pages rely on the id tie-break to neither skip nor repeat.
		runs := claim(t, s, "a", n)
		require.Len(t, runs, n)
		for _, r := range runs {
			_, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
				Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), Command: "/w", GateLabel: "Check", Output: "out", RequiredApprovals: 1}})
			require.NoError(t, err)
		}

		pageRuns := func(status string, limit int) []string {
			var ids []string
			var after *store.ListCursor
			for {
				page, err := s.RunList(ctx, &store.RunListParams{Status: status, After: after, Limit: limit})
				require.NoError(t, err)
				for _, r := range page {
					ids = append(ids, r.ID)
				}
				if len(page) < limit {
					return ids
				}
				last := page[len(page)-1]
				after = &store.ListCursor{CreatedAt: last.CreatedAt, ID: last.ID}
			}
		}
		pageHolds := func(status string, limit int) []string {
			var ids []string
			var after *store.ListCursor
			for {
				page, err := s.HoldList(ctx, &store.HoldListParams{Status: status, After: after, Limit: limit})
				require.NoError(t, err)
				for _, h := range page {
					ids = append(ids, h.ID)
				}
				if len(page) < limit {
					return ids
				}
				last := page[len(page)-1]
				after = &store.ListCursor{CreatedAt: last.CreatedAt, ID: last.ID}
			}
		}
		runIDs := func(rs []*store.Run) (ids []string) {
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
			return ids
		}
		holdIDs := func(hs []*store.Hold) (ids []string) {
			for _, h := range hs {
				ids = append(ids, h.ID)
			}
			return ids
		}

		all, err := s.RunList(ctx, &store.RunListParams{Status: store.RunSuspended, Limit: 100})
		require.NoError(t, err)
		require.Len(t, all, n)
		for i := 1; i < n; i++ {
			require.False(t, all[i].CreatedAt.After(all[i-1].CreatedAt), "runs come newest first")
		}
		for _, limit := range []int{1, 3, n} {
			require.Equal(t, runIDs(all), pageRuns(store.RunSuspended, limit), "runs by status, pages of %d", limit)
			require.Equal(t, runIDs(all), pageRuns("", limit), "all runs, pages of %d", limit)
		}

		open, err := s.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: 100})
		require.NoError(t, err)
		require.Len(t, open, n)
		for i := 1; i < n; i++ {
			require.False(t, open[i].CreatedAt.Before(open[i-1].CreatedAt), "open holds come oldest first")
		}
		for _, limit := range []int{1, 3, n} {
			require.Equal(t, holdIDs(open), pageHolds(store.HoldOpen, limit), "open holds, pages of %d", limit)
		}

		for _, h := range open[:3] {
			_, err := s.HoldDecide(ctx, &store.HoldDecideParams{HoldID: h.ID, Status: store.HoldRejected, DecidedBy: "ada", DecidedVia: "api",
				RunDecision: "rejected", Outcome: &store.RunOutcome{Status: store.RunCancelled, ItemStatus: store.ItemFailed},
				Audit: store.HoldDecision{HoldID: h.ID, RunID: h.RunID, Decision: "reject", DecidedBy: "ada", Outcome: store.AttemptAccepted}})
			require.NoError(t, err)
		}
		rejected, err := s.HoldList(ctx, &store.HoldListParams{Status: store.HoldRejected, Limit: 100})
		require.NoError(t, err)
		require.Len(t, rejected, 3)
		for i := 1; i < len(rejected); i++ {
			require.False(t, rejected[i].CreatedAt.After(rejected[i-1].CreatedAt), "decided holds come newest first")
		}
		history, err := s.HoldList(ctx, &store.HoldListParams{Limit: 100})
		require.NoError(t, err)
		for _, limit := range []int{1, 2} {
			require.Equal(t, holdIDs(rejected), pageHolds(store.HoldRejected, limit), "rejected holds, pages of %d", limit)
			require.Equal(t, holdIDs(history), pageHolds("", limit), "every hold, pages of %d", limit)
		}
		require.Equal(t, holdIDs(open[3:]), pageHolds(store.HoldOpen, 2), "a decided hold leaves the open queue")
	})
}

// leaseOf reads a run's current lease.
func leaseOf(t *testing.T, s store.Store, id string) int64 {
	t.Helper()
	r, err := s.RunGetByID(context.Background(), id)
	require.NoError(t, err)
	return r.Lease
}

// claim claims up to limit pending items as the engine does: list, then
// claim those.
func claim(t *testing.T, s store.Store, runner string, limit int) []*store.Run {
	t.Helper()
	pending, err := s.QueueItemListPending(context.Background(), limit)
	require.NoError(t, err)
	runs, err := s.QueueItemClaim(context.Background(), &store.QueueItemClaimParams{RunnerID: runner, Claims: claims(pending)})
	require.NoError(t, err)
	return runs
}

func claims(items []*store.QueueItemHead) []store.ItemClaim {
	out := make([]store.ItemClaim, len(items))
	for i, it := range items {
		out[i] = store.ItemClaim{ItemID: it.ID}
	}
	return out
}
