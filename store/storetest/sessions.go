package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runSessions covers the session runtime's store methods.
func runSessions(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	ptr := func(s string) *string { return &s }

	newSession := func(t *testing.T, s store.Store, origin, title string, events int) *store.Session {
		t.Helper()
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Title: title, Origin: origin, Policy: store.PolicyAuto})
		require.NoError(t, err)
		for i := range events {
			_, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Payload: map[string]any{"text": fmt.Sprint(i)}})
			require.NoError(t, err)
		}
		return ses
	}
	ids := func(ss []*store.Session) []string {
		out := []string{}
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}

	t.Run("SessionListFiltersAndPages", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var users []*store.Session
		for i := range 5 {
			users = append(users, newSession(t, s, store.OriginUser, fmt.Sprintf("user %d", i), 1))
		}
		wf := newSession(t, s, store.OriginWorkflow, "workflow run", 1)
		empty := newSession(t, s, store.OriginUser, "nothing yet", 0)
		arch := newSession(t, s, store.OriginChannel, "archived thread", 1)
		_, _, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: arch.ID, Archived: ptr2(true)})
		require.NoError(t, err)

		got, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser, store.OriginChannel}})
		require.NoError(t, err)
		want := []string{users[4].ID, users[3].ID, users[2].ID, users[1].ID, users[0].ID}
		require.Equal(t, want, ids(got), "newest activity first; workflow, empty and archived sessions left out")
		require.NotContains(t, ids(got), empty.ID)

		got, err = s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser, store.OriginChannel, store.OriginWorkflow}, IncludeArchived: true})
		require.NoError(t, err)
		require.Equal(t, append([]string{arch.ID, wf.ID}, want...), ids(got))

		// Keyset pages of two walk the same order without gaps or repeats.
		var paged []string
		var after *store.SessionCursor
		for {
			page, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, After: after, Limit: 2})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			paged = append(paged, ids(page)...)
			last := page[len(page)-1]
			after = &store.SessionCursor{LastActiveAt: last.LastActiveAt, ID: last.ID}
		}
		require.Equal(t, want, paged)

		// New activity moves a session to the top.
		_, err = s.EventAppend(ctx, &store.EventAppendParams{SessionID: users[0].ID, Type: store.EventUserMessage})
		require.NoError(t, err)
		got, err = s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []string{users[0].ID}, ids(got))

		got, err = s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, Query: "USER 3"})
		require.NoError(t, err)
		require.Equal(t, []string{users[3].ID}, ids(got), "the text filter matches titles case-insensitively")
		got, err = s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, Query: "50%"})
		require.NoError(t, err)
		require.Empty(t, got, "LIKE wildcards in the query are literal")
	})

	t.Run("SessionListMatchesTags", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack", Tags: []string{"slack:C42:1.5"}})
		require.NoError(t, err)
		_, err = s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage})
		require.NoError(t, err)
		newSession(t, s, store.OriginChannel, "other", 1)
		got, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginChannel}, Query: "c42"})
		require.NoError(t, err)
		require.Equal(t, []string{ses.ID}, ids(got))
	})

	t.Run("EventListAfterIsExclusive", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses := newSession(t, s, store.OriginUser, "t", 0)
		var evs []*store.Event
		for i := range 6 {
			ev, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Payload: map[string]any{"n": float64(i)}})
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		all, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID})
		require.NoError(t, err)
		require.Len(t, all, 6)
		require.Equal(t, map[string]any{"n": float64(0)}, all[0].Payload)

		got, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: evs[2].TS})
		require.NoError(t, err)
		require.Equal(t, []int64{evs[3].ID, evs[4].ID, evs[5].ID}, eventIDs(got))
		got, err = s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: evs[2].TS, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{evs[3].ID, evs[4].ID}, eventIDs(got))
		got, err = s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: evs[2].TS.Add(500 * time.Nanosecond)})
		require.NoError(t, err)
		require.Equal(t, []int64{evs[3].ID, evs[4].ID, evs[5].ID}, eventIDs(got), "a finer-than-µs bound stays exact")
		got, err = s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Newest: true, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{evs[4].ID, evs[5].ID}, eventIDs(got), "newest page, ascending")
		got, err = s.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: evs[5].TS})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("SessionUpdateSetsPolicyWithItsEvent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses := newSession(t, s, store.OriginUser, "t", 0)
		require.Equal(t, store.PolicyAuto, ses.Policy)
		got, evs, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, Policy: ptr(store.PolicyYolo),
			Events: []*store.EventAppendParams{{Type: store.EventPolicySet, Payload: map[string]any{"policy": "yolo"}}}})
		require.NoError(t, err)
		require.Equal(t, store.PolicyYolo, got.Policy)
		require.Len(t, evs, 1)
		_, err = s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventPolicySet, Payload: map[string]any{"policy": "manual"}})
		require.NoError(t, err)
		got, err = s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, store.PolicyYolo, got.Policy, "the store keeps what it is told, it does not read events")
		require.Equal(t, store.PolicyAuto, got.BasePolicy, "the starting posture is kept")
	})

	t.Run("SessionForkCopiesEarlierEventsAndPosture", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		src, err := s.SessionCreate(ctx, &store.SessionCreateParams{Title: "src", Origin: store.OriginChannel, Platform: "slack",
			Tags: []string{"slack:C1:9.9"}, Policy: store.PolicyAuto, Capabilities: []string{"wiki"}})
		require.NoError(t, err)
		app := func(typ string, payload map[string]any) *store.Event {
			ev, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: src.ID, Type: typ, Actor: "u", Payload: payload})
			require.NoError(t, err)
			return ev
		}
		e1 := app(store.EventUserMessage, map[string]any{"text": "one"})
		e2 := app(store.EventPolicySet, map[string]any{"policy": "yolo"})
		e3 := app(store.EventAssistantMessage, map[string]any{"text": "two"})
		app(store.EventPolicySet, map[string]any{"policy": "manual"})
		app(store.EventUserMessage, map[string]any{"text": "three"})

		policies, err := s.EventList(ctx, &store.EventListParams{SessionID: src.ID, Types: []string{store.EventPolicySet},
			Until: e3.TS, Newest: true, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []int64{e2.ID}, eventIDs(policies), "Until keeps events at or before it")
		fork, err := s.SessionFork(ctx, &store.SessionForkParams{SourceID: src.ID, At: e3.TS, Policy: store.PolicyYolo})
		require.NoError(t, err)
		require.Equal(t, src.ID, fork.ForkedFrom)
		require.Equal(t, store.PolicyYolo, fork.Policy, "the posture the caller found in force")
		require.Equal(t, store.PolicyAuto, fork.BasePolicy, "and the source's starting posture")
		require.Equal(t, int64(3), fork.EventCount)
		require.Empty(t, fork.Tags, "tags stay with their one session")
		require.Equal(t, []string{"wiki"}, fork.Capabilities)
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: fork.ID})
		require.NoError(t, err)
		require.Len(t, evs, 3)
		for i, want := range []*store.Event{e1, e2, e3} {
			require.Equal(t, want.TS, evs[i].TS)
			require.Equal(t, want.Type, evs[i].Type)
			require.Equal(t, want.Payload, evs[i].Payload)
			require.Greater(t, evs[i].ID, want.ID, "copies get new ids")
		}

		early, err := s.SessionFork(ctx, &store.SessionForkParams{SourceID: src.ID, At: e1.TS, Policy: store.PolicyAuto})
		require.NoError(t, err)
		require.Equal(t, int64(1), early.EventCount)

		_, err = s.SessionFork(ctx, &store.SessionForkParams{SourceID: "ses_missing", At: e1.TS, Policy: store.PolicyAuto})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SessionUpdateCompareAndSet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses := newSession(t, s, store.OriginUser, "t", 0)
		got, evs, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, ExpectActiveRunID: ptr(""),
			ActiveRunID: ptr("turn_1"), Status: ptr(store.SessionRunning),
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Actor: "user:u1", Payload: map[string]any{"text": "hi"}}}})
		require.NoError(t, err)
		require.Equal(t, "turn_1", got.ActiveRunID)
		require.Equal(t, store.SessionRunning, got.Status)
		require.Len(t, evs, 1)
		require.Equal(t, int64(1), got.EventCount)

		_, _, err = s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, ExpectActiveRunID: ptr(""), ActiveRunID: ptr("turn_2"),
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage}}})
		require.ErrorIs(t, err, store.ErrConflict)
		got, err = s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, "turn_1", got.ActiveRunID, "a refused claim changes nothing")
		require.Equal(t, int64(1), got.EventCount)

		_, _, err = s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: "ses_missing", Archived: ptr2(true)})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SessionCreateWithEventsAndRetitle", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginAgent, Policy: store.PolicyManual, Events: []*store.EventAppendParams{
			{Type: store.EventContext, Actor: "agent", Payload: map[string]any{"purpose": "triage"}}}})
		require.NoError(t, err)
		require.Equal(t, int64(1), ses.EventCount, "the first events commit with the session")
		require.Equal(t, store.PolicyManual, ses.Policy)
		got, _, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, Title: ptr("Triage")})
		require.NoError(t, err)
		require.Equal(t, "Triage", got.Title)
		require.Zero(t, got.OpenHolds)
		counts, err := s.SessionOpenHoldCounts(ctx, []string{ses.ID})
		require.NoError(t, err)
		require.Empty(t, counts)
	})

	t.Run("TurnHeartbeatCancelAndInterrupt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		lost := newSession(t, s, store.OriginUser, "lost", 0)
		_, _, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: lost.ID, ActiveRunID: ptr("turn_1"), Status: ptr(store.SessionRunning)})
		require.NoError(t, err)
		live := newSession(t, s, store.OriginUser, "live", 0)
		_, _, err = s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: live.ID, ActiveRunID: ptr("turn_2"), Status: ptr(store.SessionRunning)})
		require.NoError(t, err)
		got, err := s.SessionGetByID(ctx, live.ID)
		require.NoError(t, err)
		require.NotNil(t, got.TurnHeartbeatAt, "a new active run starts its heartbeat")

		later := time.Now().Add(time.Minute)
		cancel, err := s.SessionTurnHeartbeat(ctx, live.ID, "turn_2", later)
		require.NoError(t, err)
		require.Empty(t, cancel)
		require.NoError(t, s.SessionTurnCancel(ctx, live.ID, "turn_2", "terminated by ada"))
		cancel, err = s.SessionTurnHeartbeat(ctx, live.ID, "turn_2", later)
		require.NoError(t, err)
		require.Equal(t, "terminated by ada", cancel, "the running process reads the request with its heartbeat")
		_, err = s.SessionTurnHeartbeat(ctx, live.ID, "turn_9", later)
		require.ErrorIs(t, err, store.ErrConflict)
		require.ErrorIs(t, s.SessionTurnCancel(ctx, live.ID, "turn_9", "x"), store.ErrConflict)

		n, err := s.SessionTurnsInterrupt(ctx, time.Now().Add(time.Second), "restarted")
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "only the turn whose heartbeat went stale")
		got, err = s.SessionGetByID(ctx, lost.ID)
		require.NoError(t, err)
		require.Empty(t, got.ActiveRunID)
		require.Equal(t, []string{store.SessionFailed, "restarted"}, []string{got.Status, got.DoneReason})
		got, err = s.SessionGetByID(ctx, live.ID)
		require.NoError(t, err)
		require.Equal(t, "turn_2", got.ActiveRunID)
	})

	t.Run("SessionTouch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses := newSession(t, s, store.OriginAgent, "agent", 0)
		for range 3 {
			require.NoError(t, s.SessionTouch(ctx, &store.SessionTouchParams{ID: ses.ID, CallerUser: "ada", CallerKeyID: "key_1"}))
		}
		got, err := s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, int64(3), got.RequestCount)
		require.Equal(t, "ada", got.CallerUser)
		require.Equal(t, "key_1", got.CallerKeyID)
		require.False(t, got.LastActiveAt.Before(ses.LastActiveAt))
		require.NoError(t, s.SessionTouch(ctx, &store.SessionTouchParams{ID: ses.ID}))
		got, err = s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, "ada", got.CallerUser, "a request without identity keeps the last one")
		require.ErrorIs(t, s.SessionTouch(ctx, &store.SessionTouchParams{ID: "ses_missing"}), store.ErrNotFound)
		require.Empty(t, got.CreatedBy, "no creator was recorded")
	})

	t.Run("SessionCreatedByIsKept", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Title: "agent", Origin: store.OriginAgent, Policy: store.PolicyAuto,
			CallerKeyID: "key_1", CreatedBy: "key:key_1"})
		require.NoError(t, err)
		require.Equal(t, "key:key_1", ses.CreatedBy)
		require.NoError(t, s.SessionTouch(ctx, &store.SessionTouchParams{ID: ses.ID, CallerUser: "bob", CallerKeyID: "key_2"}))
		got, err := s.SessionGetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, "key:key_1", got.CreatedBy, "stamping refreshes the caller, never the creator")
		require.Equal(t, "key_2", got.CallerKeyID)
	})

	t.Run("EventSubscribe", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		notices := s.EventSubscribe(subCtx)
		// waitFor answers once a notice covers event id: notices coalesce,
		// so it is the newest id that counts.
		waitFor := func(what string, id int64) {
			t.Helper()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case got := <-notices:
					if got >= id {
						return
					}
				case <-deadline:
					t.Fatalf("no notice for %s (event %d)", what, id)
				}
			}
		}

		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Origin: store.OriginChannel, Tags: []string{"slack:C1:9.000001"}, Policy: "auto",
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Actor: "slack:U1", Payload: map[string]any{"text": "hi"}}}})
		require.NoError(t, err)
		evs, err := s.EventList(ctx, &store.EventListParams{SessionID: ses.ID})
		require.NoError(t, err)
		waitFor("a session created with events", evs[0].ID)

		ev, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventAssistantMessage, Actor: "holdfast"})
		require.NoError(t, err)
		waitFor("an appended event", ev.ID)

		_, upd, err := s.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, Events: []*store.EventAppendParams{
			{Type: store.EventAssistantMessage, Actor: "holdfast", Payload: map[string]any{"text": "a chat reply"}}}})
		require.NoError(t, err)
		waitFor("a session update with events", upd[0].ID)

		_, err = s.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{Key: "EvN", Kind: store.SlackKindEvent, Body: []byte(`{}`)}})
		require.NoError(t, err)
		pending, err := s.SlackInboxPending(ctx, 1)
		require.NoError(t, err)
		ev, err = s.SlackInboxAppendEvent(ctx, pending[0].ID, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventUserMessage, Actor: "slack:U1"})
		require.NoError(t, err)
		waitFor("an event appended with its inbox delivery", ev.ID)

		// Once ctx is done the channel closes with no notice of a later
		// commit: a second subscriber hearing of it proves it went out.
		cancel()
		otherCtx, stopOther := context.WithCancel(ctx)
		defer stopOther()
		other := s.EventSubscribe(otherCtx)
		ev, err = s.EventAppend(ctx, &store.EventAppendParams{SessionID: ses.ID, Type: store.EventAssistantMessage, Actor: "holdfast"})
		require.NoError(t, err)
		select {
		case got := <-other:
			require.GreaterOrEqual(t, got, ev.ID)
		case <-time.After(5 * time.Second):
			t.Fatal("no notice for the second subscriber")
		}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case got, ok := <-notices:
				if !ok {
					return
				}
				require.Less(t, got, ev.ID, "a cancelled subscription hears of no later commit")
			case <-deadline:
				t.Fatal("a cancelled subscription's channel is not closed")
			}
		}
	})
}

func ptr2(b bool) *bool { return &b }

func eventIDs(evs []*store.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}
