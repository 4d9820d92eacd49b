package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runConsoleLists covers what the console's pages ask of runs, holds, users
// and memos beyond the engine's own needs: filters, kept counts, provenance,
// disabled users and drafts.
func runConsoleLists(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	// fixture is two workflows' runs in two sessions with titles and briefs.
	type fixture struct {
		s      store.Store
		runs   map[string]*store.Run // by dedupe key
		wfA    string
		wfB    string
		sesOne string
	}
	workflowNamed := func(t *testing.T, s store.Store, cmd string) string {
		t.Helper()
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: cmd, Body: "w", MemoType: store.MemoTypeWorkflow,
			Workflow: &store.WorkflowIndex{Command: cmd, Status: "live"}})
		require.NoError(t, err)
		return m.ID
	}
	build := func(t *testing.T) *fixture {
		t.Helper()
		s := newStore(t)
		f := &fixture{s: s, runs: map[string]*store.Run{}, wfA: workflowNamed(t, s, "/alpha"), wfB: workflowNamed(t, s, "/beta")}
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Title: "one", Origin: store.OriginUser})
		require.NoError(t, err)
		f.sesOne = ses.ID
		items := []struct {
			key, wf, cmd, title, brief, session, owner string
		}{
			{"a1", f.wfA, "/alpha", "Otter census", "Count the otters at dawn", f.sesOne, "user:ada"},
			{"a2", f.wfA, "/alpha", "", "Heron nests\nsecond line", "", "user:bob"},
			{"a3", f.wfA, "/alpha", "Weekly otter digest", "", f.sesOne, "user:ada"},
			{"b1", f.wfB, "/beta", "Kingfisher survey", "rivers and OTTERS", "", "slack:U1"},
			{"b2", f.wfB, "/beta", "Beaver dams", "", "", "user:bob"},
		}
		for i, it := range items {
			p := &store.QueueItemInsertParams{ID: store.NewID("itm"), OwnerUID: it.owner, WorkflowMemoID: it.wf, Command: it.cmd,
				DedupeKey: it.key, Payload: map[string]any{"title": it.title, "brief": it.brief}, SessionID: it.session}
			if it.session == "" {
				p.NewSession = &store.SessionCreateParams{Origin: store.OriginWorkflow, Policy: "auto"}
			}
			_, _, err := s.QueueItemInsert(ctx, p)
			require.NoError(t, err)
			// One claim per item, a minute apart, oldest first.
			pending, err := s.QueueItemListPending(ctx, 1)
			require.NoError(t, err)
			runs, err := s.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: "r", Claims: claims(pending),
				Now: time.Now().Add(time.Duration(i-len(items)) * time.Minute)})
			require.NoError(t, err)
			require.Len(t, runs, 1)
			f.runs[it.key] = runs[0]
		}
		settle := func(key, status string) {
			r := f.runs[key]
			_, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: status})
			require.NoError(t, err)
		}
		settle("a1", store.RunSucceeded)
		settle("a2", store.RunFailed)
		settle("b1", store.RunSucceeded)
		for _, key := range []string{"a3", "b2"} {
			r := f.runs[key]
			_, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
				Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), ItemID: r.ItemID, SessionID: r.SessionID, OwnerUID: r.OwnerUID,
					Command: r.Command, GateLabel: "Check", Output: "out", RequiredApprovals: 1}})
			require.NoError(t, err)
		}
		return f
	}
	keys := func(f *fixture, rs []*store.Run) []string {
		byID := map[string]string{}
		for k, r := range f.runs {
			byID[r.ID] = k
		}
		out := []string{}
		for _, r := range rs {
			out = append(out, byID[r.ID])
		}
		return out
	}

	t.Run("RunListFilters", func(t *testing.T) {
		t.Parallel()
		f := build(t)
		for name, tc := range map[string]struct {
			p    store.RunListParams
			want []string
		}{
			"All":                {store.RunListParams{}, []string{"b2", "b1", "a3", "a2", "a1"}},
			"Workflow":           {store.RunListParams{Command: "/alpha"}, []string{"a3", "a2", "a1"}},
			"WorkflowAndStatus":  {store.RunListParams{Command: "/alpha", Status: store.RunSucceeded}, []string{"a1"}},
			"Session":            {store.RunListParams{SessionID: f.sesOne}, []string{"a3", "a1"}},
			"SessionAndWorkflow": {store.RunListParams{SessionID: f.sesOne, Command: "/beta"}, []string{}},
			"TextInTitleOrBrief": {store.RunListParams{Query: "otter"}, []string{"b1", "a3", "a1"}},
			"TextIsCaseBlind":    {store.RunListParams{Query: "HERON"}, []string{"a2"}},
			"TextAndWorkflow":    {store.RunListParams{Query: "otter", Command: "/alpha"}, []string{"a3", "a1"}},
			"TextAndStatus":      {store.RunListParams{Query: "otter", Status: store.RunSucceeded}, []string{"b1", "a1"}},
			"TextAndSession":     {store.RunListParams{Query: "otter", SessionID: f.sesOne}, []string{"a3", "a1"}},
			"ShortText":          {store.RunListParams{Query: "da"}, []string{"b2", "a1"}},
			"ShortTextWorkflow":  {store.RunListParams{Query: "ot", Command: "/alpha"}, []string{"a3", "a1"}},
			"NoMatch":            {store.RunListParams{Query: "zebra"}, []string{}},
			"Punctuation":        {store.RunListParams{Query: `"otter`}, []string{}},
		} {
			got, err := f.s.RunList(ctx, &tc.p)
			require.NoError(t, err, name)
			require.Equal(t, tc.want, keys(f, got), name)
		}
	})

	t.Run("RunListFiltersPage", func(t *testing.T) {
		t.Parallel()
		f := build(t)
		for _, p := range []store.RunListParams{{Command: "/alpha"}, {Query: "otter"}, {Query: "ot"}, {}} {
			all, err := f.s.RunList(ctx, &store.RunListParams{Command: p.Command, Query: p.Query, Limit: 100})
			require.NoError(t, err)
			var paged []*store.Run
			var after *store.ListCursor
			for {
				q := p
				q.Limit, q.After = 1, after
				page, err := f.s.RunList(ctx, &q)
				require.NoError(t, err)
				paged = append(paged, page...)
				if len(page) < 1 {
					break
				}
				after = &store.ListCursor{CreatedAt: page[0].CreatedAt, ID: page[0].ID}
			}
			require.Equal(t, keys(f, all), keys(f, paged), "%+v pages of 1 neither skip nor repeat", p)
		}
	})

	t.Run("RunCountsFollowStatus", func(t *testing.T) {
		t.Parallel()
		f := build(t)
		counts := func(p store.RunCountParams) map[string]int64 {
			c, err := f.s.RunCountsByStatus(ctx, &p)
			require.NoError(t, err)
			require.False(t, c.Capped)
			out := map[string]int64{}
			for k, v := range c.ByStatus {
				if v != 0 {
					out[k] = v
				}
			}
			return out
		}
		require.Equal(t, map[string]int64{"succeeded": 2, "failed": 1, "suspended": 2}, counts(store.RunCountParams{}))
		require.Equal(t, map[string]int64{"succeeded": 1, "failed": 1, "suspended": 1}, counts(store.RunCountParams{Command: "/alpha"}))
		require.Equal(t, map[string]int64{"succeeded": 1, "suspended": 1}, counts(store.RunCountParams{SessionID: f.sesOne}))
		require.Equal(t, map[string]int64{"succeeded": 2, "suspended": 1}, counts(store.RunCountParams{Query: "otter"}))
		require.Equal(t, map[string]int64{"succeeded": 1, "suspended": 1}, counts(store.RunCountParams{Query: "da"}))

		h := store.HoldIDForRun(f.runs["b2"].ID)
		held, err := f.s.HoldGetByID(ctx, h)
		require.NoError(t, err)
		_, err = f.s.HoldDecide(ctx, decision(held, "reject", "ada", time.Time{}))
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"succeeded": 2, "failed": 1, "suspended": 1, "cancelled": 1}, counts(store.RunCountParams{}),
			"kept counts follow a run's status")
		require.Equal(t, map[string]int64{"succeeded": 1, "cancelled": 1}, counts(store.RunCountParams{Command: "/beta"}))

		c, err := f.s.RunCountsByStatus(ctx, &store.RunCountParams{Query: "otter", Cap: 2})
		require.NoError(t, err)
		require.True(t, c.Capped, "a text count stops at its cap and says so")

		hours, err := f.s.RunHourCounts(ctx, time.Now().Add(-24*time.Hour))
		require.NoError(t, err)
		var total int64
		for _, hc := range hours {
			require.False(t, hc.Hour.After(time.Now()))
			total += hc.N
		}
		require.Equal(t, int64(5), total, "every run of the last day is in one hour's count")
		later, err := f.s.RunHourCounts(ctx, time.Now().Add(2*time.Hour))
		require.NoError(t, err)
		require.Empty(t, later)
	})

	t.Run("MemoProvenanceAndItemsByID", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wf := workflowNamed(t, s, "/w")
		it, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf, Command: "/w",
			DedupeKey: "k", Payload: map[string]any{"title": "T"}})
		require.NoError(t, err)
		runs := claim(t, s, "r", 1)
		r, err := s.RunSettle(ctx, &store.RunSettleParams{RunID: runs[0].ID, Lease: runs[0].Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{MemoID: store.NewID("mem"), Create: &store.MemoCreateParams{Title: "Out", Body: "out"}}})
		require.NoError(t, err)
		got, err := s.RunListByDispatchMemo(ctx, r.DispatchMemoID, 5)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, r.ID, got[0].ID)
		require.Equal(t, "T", got[0].Payload["title"])
		none, err := s.RunListByDispatchMemo(ctx, "mem_missing", 5)
		require.NoError(t, err)
		require.Empty(t, none)

		items, err := s.QueueItemListByIDs(ctx, []string{it.ID, "itm_missing"})
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.Equal(t, "T", items[0].Payload["title"])
		require.Equal(t, it.ID, store.ItemIDForRun(store.RunIDForItem(it.ID)))
	})

	t.Run("HoldFiltersAndDecidedHistory", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		wfA, wfB := workflowNamed(t, s, "/alpha"), workflowNamed(t, s, "/beta")
		var holds []*store.Hold
		for i, it := range []struct{ wf, cmd, owner string }{
			{wfA, "/alpha", "user:ada"}, {wfB, "/beta", "user:bob"}, {wfA, "/alpha", "user:bob"}, {wfB, "/beta", "user:ada"},
		} {
			_, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), OwnerUID: it.owner, WorkflowMemoID: it.wf,
				Command: it.cmd, DedupeKey: fmt.Sprint(i)})
			require.NoError(t, err)
			runs := claim(t, s, "r", 1)
			h, err := s.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: runs[0].ID, Lease: runs[0].Lease},
				Hold: &store.Hold{ID: store.HoldIDForRun(runs[0].ID), OwnerUID: it.owner, Command: it.cmd, RequiredApprovals: 1}})
			require.NoError(t, err)
			holds = append(holds, h)
		}
		ids := func(p store.HoldListParams) []string {
			hs, err := s.HoldList(ctx, &p)
			require.NoError(t, err)
			out := []string{}
			for _, h := range hs {
				for i, x := range holds {
					if x.ID == h.ID {
						out = append(out, fmt.Sprint(i))
					}
				}
			}
			return out
		}
		count := func(p store.HoldListParams) int64 {
			n, err := s.HoldCountOpenMatching(ctx, &p)
			require.NoError(t, err)
			return n
		}
		require.Equal(t, []string{"0", "2"}, ids(store.HoldListParams{Status: store.HoldOpen, Command: "/alpha"}))
		require.Equal(t, []string{"1", "2"}, ids(store.HoldListParams{Status: store.HoldOpen, OwnerUID: "user:bob"}))
		require.Equal(t, []string{"2"}, ids(store.HoldListParams{Status: store.HoldOpen, OwnerUID: "user:bob", Command: "/alpha"}))
		require.Equal(t, int64(2), count(store.HoldListParams{Command: "/beta"}))
		require.Equal(t, int64(1), count(store.HoldListParams{Command: "/beta", OwnerUID: "user:ada"}))

		// Decided out of creation order: the history follows decision time.
		for _, i := range []int{2, 0, 3} {
			_, err := s.HoldDecide(ctx, decision(holds[i], "reject", "cy", time.Now().Add(time.Duration(i)*time.Second)))
			require.NoError(t, err)
		}
		require.Equal(t, []string{"3", "2", "0"}, ids(store.HoldListParams{Decided: true}), "newest decision first")
		require.Equal(t, []string{"2", "0"}, ids(store.HoldListParams{Decided: true, Command: "/alpha"}))
		require.Equal(t, []string{"3", "0"}, ids(store.HoldListParams{Decided: true, OwnerUID: "user:ada"}))
		first, err := s.HoldList(ctx, &store.HoldListParams{Decided: true, Limit: 1})
		require.NoError(t, err)
		next := ids(store.HoldListParams{Decided: true, Limit: 5,
			After: &store.ListCursor{CreatedAt: *first[0].DecidedAt, ID: first[0].ID}})
		require.Equal(t, []string{"2", "0"}, next, "the decided history pages by decision time")
		require.Equal(t, int64(0), count(store.HoldListParams{Command: "/alpha"}))
		require.Equal(t, []string{"1"}, ids(store.HoldListParams{Status: store.HoldOpen, Command: "/beta"}))
	})

	t.Run("DisabledUsersAndPasswordReset", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		u, err := s.UserCreate(ctx, &store.User{Username: "ada", PasswordHash: "old", Role: store.RoleAdmin})
		require.NoError(t, err)
		require.False(t, u.Disabled)
		session := func(id string) {
			_, err := s.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: id, SecretHash: "h", UserID: u.ID, CSRFToken: "t",
				ExpiresAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
		}
		session("cs1")
		got, err := s.UserDisabledSet(ctx, u.ID, true)
		require.NoError(t, err)
		require.True(t, got.Disabled)
		_, err = s.ConsoleSessionGetByID(ctx, "cs1")
		require.ErrorIs(t, err, store.ErrNotFound, "disabling ends the user's sign-ins")
		got, err = s.UserDisabledSet(ctx, u.ID, false)
		require.NoError(t, err)
		require.False(t, got.Disabled)
		_, err = s.UserDisabledSet(ctx, "usr_missing", true)
		require.ErrorIs(t, err, store.ErrNotFound)

		session("cs2")
		got, err = s.UserPasswordSet(ctx, u.ID, "new")
		require.NoError(t, err)
		require.Equal(t, "new", got.PasswordHash)
		_, err = s.ConsoleSessionGetByID(ctx, "cs2")
		require.ErrorIs(t, err, store.ErrNotFound, "a new password ends the old sign-ins")
		_, err = s.UserPasswordSet(ctx, "usr_missing", "x")
		require.ErrorIs(t, err, store.ErrNotFound)

		session("cs3")
		require.NoError(t, s.ConsoleDraftCreate(ctx, &store.ConsoleDraft{ID: "d1", SessionID: "cs3", Body: "text"}))
		d, err := s.ConsoleDraftGetByID(ctx, "d1", "cs3")
		require.NoError(t, err)
		require.Equal(t, "text", d.Body)
		_, err = s.ConsoleDraftGetByID(ctx, "d1", "cs-other")
		require.ErrorIs(t, err, store.ErrNotFound, "a draft is its sign-in's alone")
		require.NoError(t, s.ConsoleSessionDelete(ctx, "cs3"))
		_, err = s.ConsoleDraftGetByID(ctx, "d1", "cs3")
		require.ErrorIs(t, err, store.ErrNotFound, "a draft dies with its sign-in")
	})

	t.Run("MemoSearchPages", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for i := range 5 {
			_, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: fmt.Sprintf("Otters %d", i), Body: "otters"})
			require.NoError(t, err)
		}
		for _, q := range []string{"", "otters"} {
			all, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: q, Limit: 10})
			require.NoError(t, err)
			require.Len(t, all, 5)
			second, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: q, Limit: 2, Offset: 2})
			require.NoError(t, err)
			require.Equal(t, []string{all[2].ID, all[3].ID}, []string{second[0].ID, second[1].ID}, "query %q", q)
		}
	})
}
