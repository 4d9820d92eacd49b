package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runWorkflows is the workflow index's part of the suite: the names each
// workflow looked up, and the checks that keep an index from going stale
// when the library changes under it (SPEC §4.1).
func runWorkflows(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	gateName := func(exists bool) []store.WorkflowName {
		return []store.WorkflowName{{Name: "Style guide", Exists: exists}}
	}
	// setup makes a workflow naming a Gate "Style guide" that does not exist.
	setup := func(t *testing.T) (store.Store, *store.Memo) {
		t.Helper()
		s := newStore(t)
		wf, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "W", Body: "w", MemoType: store.MemoTypeWorkflow,
			Workflow: &store.WorkflowIndex{Command: "/w", Status: "draft", Errors: []store.CompileError{{Line: 9, Message: "no gate"}},
				Names: gateName(false)}})
		require.NoError(t, err)
		return s, wf
	}
	source := func(t *testing.T, s store.Store, names ...string) *store.WorkflowSource {
		t.Helper()
		srcs, err := s.WorkflowSourceList(ctx, &store.WorkflowSourceListParams{Names: names})
		require.NoError(t, err)
		require.Len(t, srcs, 1)
		return srcs[0]
	}
	live := func(src *store.WorkflowSource) []*store.WorkflowRecompile {
		return []*store.WorkflowRecompile{{MemoID: src.Memo.ID, MemoVersion: src.Memo.ContentVersion, Revision: src.Revision,
			Index: &store.WorkflowIndex{Command: "/w", Status: "live", Names: gateName(true)}}}
	}

	t.Run("WorkflowSourcesByName", func(t *testing.T) {
		t.Parallel()
		s, wf := setup(t)
		src := source(t, s, "STYLE GUIDE", "other")
		require.Equal(t, wf.ID, src.Memo.ID)
		require.Equal(t, "w", src.Memo.Body)
		require.Equal(t, "draft", src.Workflow.Status)
		require.Equal(t, []string{"Style guide"}, src.Names)
		require.Positive(t, src.Revision)
		none, err := s.WorkflowSourceList(ctx, &store.WorkflowSourceListParams{Names: []string{"Nothing"}})
		require.NoError(t, err)
		require.Empty(t, none)
		all, err := s.WorkflowSourceList(ctx, &store.WorkflowSourceListParams{All: true})
		require.NoError(t, err)
		require.Len(t, all, 1)

		_, err = s.WorkflowStatusSet(ctx, wf.ID, "paused")
		require.NoError(t, err)
		require.Greater(t, source(t, s, "Style guide").Revision, src.Revision, "a status change moves the revision")
	})

	t.Run("MemoIDsNamedMatchesNameMatchesMemo", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, tc := range []struct{ title, name string }{
			{"Style guide", "Style guide"},
			{"Style guide", "STYLE guide"},
			{"Style guide", "Style guide "},
			{"Ärger", "ärger"}, // titles compare ignoring ASCII case only
			{"Ärger", "Ärger"},
			{"House rules", "House"},
		} {
			m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: tc.title, Body: "b"})
			require.NoError(t, err)
			ids, err := s.MemoIDsNamed(ctx, tc.name)
			require.NoError(t, err)
			require.Equal(t, store.NameMatchesMemo(tc.name, m.ID, tc.title), containsID(ids, m.ID), "title %q, name %q", tc.title, tc.name)
			byID, err := s.MemoIDsNamed(ctx, m.ID)
			require.NoError(t, err)
			require.Equal(t, []string{m.ID}, byID)
		}
		ids, err := s.MemoIDsNamed(ctx, "style GUIDE")
		require.NoError(t, err)
		require.Len(t, ids, 3, "every memo of the title answers")
	})

	t.Run("AWriteMustRecompileTheWorkflowsNamingIt", func(t *testing.T) {
		t.Parallel()
		s, wf := setup(t)
		_, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "style guide", Body: "g"})
		require.ErrorIs(t, err, store.ErrStaleCompile, "a create leaving out a workflow naming its title")
		ids, err := s.MemoIDsNamed(ctx, "Style guide")
		require.NoError(t, err)
		require.Empty(t, ids, "and nothing is written")

		src := source(t, s, "Style guide")
		gate, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "style guide", Body: "g", Dependents: live(src)})
		require.NoError(t, err)
		w, err := s.WorkflowGetByMemoID(ctx, wf.ID)
		require.NoError(t, err)
		require.Equal(t, "live", w.Status, "the dependent's index commits with the memo")
		require.Empty(t, w.Errors)

		title := "Renamed"
		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: gate.ID, ExpectedVersion: gate.ContentVersion, Title: &title})
		require.ErrorIs(t, err, store.ErrStaleCompile, "a retitle leaving out a workflow naming the old title")
		body := "new body"
		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: gate.ID, ExpectedVersion: gate.ContentVersion, Body: &body})
		require.ErrorIs(t, err, store.ErrStaleCompile, "a change leaving out a workflow naming it")
		unrelated, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Unrelated", Body: "u"})
		require.NoError(t, err, "a memo no workflow names needs nothing")
		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: unrelated.ID, ExpectedVersion: 1, Body: &body})
		require.NoError(t, err)
	})

	t.Run("ARecompileMustBeCurrent", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			// spoil changes rs (read before) or the store so that rs is stale.
			spoil func(t *testing.T, s store.Store, wf *store.Memo, rs []*store.WorkflowRecompile)
		}{
			{name: "StatusChangedSince", spoil: func(t *testing.T, s store.Store, wf *store.Memo, _ []*store.WorkflowRecompile) {
				_, err := s.WorkflowStatusSet(ctx, wf.ID, "paused")
				require.NoError(t, err)
			}},
			{name: "MemoChangedSince", spoil: func(t *testing.T, s store.Store, wf *store.Memo, _ []*store.WorkflowRecompile) {
				body := "w2"
				_, err := s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: wf.ID, ExpectedVersion: wf.ContentVersion, Body: &body,
					Workflow: &store.WorkflowIndex{Command: "/w", Status: "draft", Names: gateName(false)}})
				require.NoError(t, err)
			}},
			{name: "AnAnswerNoLongerHolds", spoil: func(t *testing.T, _ store.Store, _ *store.Memo, rs []*store.WorkflowRecompile) {
				rs[0].Index.Names = []store.WorkflowName{{Name: "Style guide", Exists: true}, {Name: "House rules", Exists: true}}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, wf := setup(t)
				rs := live(source(t, s, "Style guide"))
				tc.spoil(t, s, wf, rs)
				_, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Style guide", Body: "g", Dependents: rs})
				require.ErrorIs(t, err, store.ErrStaleCompile)
				ids, err := s.MemoIDsNamed(ctx, "Style guide")
				require.NoError(t, err)
				require.Empty(t, ids, "nothing of a refused write is kept")
			})
		}
	})

	t.Run("WorkflowReindexIsChecked", func(t *testing.T) {
		t.Parallel()
		s, wf := setup(t)
		src := source(t, s, "Style guide")
		require.ErrorIs(t, s.WorkflowReindex(ctx, live(src)), store.ErrStaleCompile, "the Gate does not exist: the answer is wrong")
		stillDraft := []*store.WorkflowRecompile{{MemoID: wf.ID, MemoVersion: src.Memo.ContentVersion, Revision: src.Revision,
			Index: &store.WorkflowIndex{Command: "/w", Status: "draft", Errors: []store.CompileError{{Line: 9, Message: "no gate"}},
				Names: gateName(false)}}}
		require.NoError(t, s.WorkflowReindex(ctx, stillDraft))
		require.ErrorIs(t, s.WorkflowReindex(ctx, stillDraft), store.ErrStaleCompile, "the first re-index moved the revision")
	})

	t.Run("AWorkflowMemoChangesWithItsIndex", func(t *testing.T) {
		t.Parallel()
		s, wf := setup(t)
		body := "changed"
		_, err := s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: wf.ID, ExpectedVersion: wf.ContentVersion, Body: &body})
		require.ErrorIs(t, err, store.ErrStaleCompile)
		_, err = s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Bare", Body: "b", MemoType: store.MemoTypeWorkflow})
		require.ErrorIs(t, err, store.ErrStaleCompile)
	})

	t.Run("DispatchIsCheckedToo", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		wfID := workflowMemo(t, s)
		it, _, err := s.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wfID,
			Command: "/run", DedupeKey: "k"})
		require.NoError(t, err)
		runs := claim(t, s, "a", 1)
		require.Len(t, runs, 1)
		r := runs[0]
		create := &store.MemoCreateParams{Title: "Style guide", Body: "dispatched", Unlisted: true}
		memoID := store.NewID("mem")
		_, err = s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{MemoID: memoID, Create: create}})
		require.ErrorIs(t, err, store.ErrStaleCompile, "a dispatched memo a workflow names must recompile it")
		got, err := s.RunGetByID(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunRunning, got.Status, "and the settle is not written")
		create.Dependents = live(source(t, s, "Style guide"))
		_, err = s.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded,
			Dispatch: &store.DispatchParams{MemoID: memoID, Create: create}})
		require.NoError(t, err)
		w, err := s.WorkflowGetByCommand(ctx, "/w")
		require.NoError(t, err)
		require.Equal(t, "live", w.Status)
		require.Equal(t, it.ID, r.ItemID)
	})
}

// workflowMemo makes a workflow /run that names nothing.
func workflowMemo(t *testing.T, s store.Store) string {
	t.Helper()
	m, err := s.MemoCreate(context.Background(), &store.MemoCreateParams{Title: "Runner", Body: "r", MemoType: store.MemoTypeWorkflow,
		Workflow: &store.WorkflowIndex{Command: "/run", Status: "live"}})
	require.NoError(t, err)
	return m.ID
}

func containsID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
