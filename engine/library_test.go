package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
)

// TestDispatchKeepsCompileStatusCurrent: a run's memo write is a memo write
// like any other (SPEC §4.1): a dispatched memo that a workflow names as its
// Gate recompiles that workflow in the settle's transaction, so enqueueing it
// is refused (409) before and accepted after, with nothing in between.
func TestDispatchKeepsCompileStatusCurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gated := strings.Replace(wfDoc("/gated"), "## Load Contract\n", "## Load Contract\n- **Gate** Quokka guide\n", 1)
	for _, tc := range []struct {
		name string
		// payload makes the /draft run that dispatches; gate is the Gate
		// memo before the run (nil: none yet).
		payload func(t *testing.T, b *testBundle) (map[string]any, *store.Memo)
		// live is /gated's status before the run.
		liveBefore bool
	}{
		{name: "ANewMemoIsTheMissingGate", payload: func(t *testing.T, b *testBundle) (map[string]any, *store.Memo) {
			return map[string]any{"title": "Quokka guide", "brief": "Quokkas smile."}, nil
		}},
		{name: "AStubThatIsTheGateIsUpdated", liveBefore: true, payload: func(t *testing.T, b *testBundle) (map[string]any, *store.Memo) {
			stub, err := b.lib.Create(ctx, library.CreateParams{Title: "Quokka guide", Body: "stub"})
			require.NoError(t, err)
			return map[string]any{"title": "Quokka guide", "brief": "Quokkas smile.", "targetMemoId": stub.ID}, stub
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.workflow(t, "/draft")
			payload, gate := tc.payload(t, b)
			_, _, err := b.lib.ImportWorkflow(ctx, "", gated)
			require.NoError(t, err)
			_, _, err = b.eng.Enqueue(ctx, EnqueueParams{Command: "/gated", DedupeKey: "before"})
			if tc.liveBefore {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, store.ErrConflict, "the Gate is missing: /gated does not compile")
			}

			it := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: payload})
			r := b.waitRun(t, it.ID, EventRunFinished)
			require.Equal(t, store.RunSucceeded, r.Status, r.Error)
			m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
			require.NoError(t, err)
			require.Equal(t, "Quokka guide", m.Title)
			if gate != nil {
				require.Equal(t, gate.ID, m.ID, "the stub was updated in place")
				require.Contains(t, m.Body, "Quokkas smile.")
			}

			w, err := b.db.WorkflowGetByCommand(ctx, "/gated")
			require.NoError(t, err)
			require.Empty(t, w.Errors)
			require.Equal(t, "live", w.Status)
			_, _, err = b.eng.Enqueue(ctx, EnqueueParams{Command: "/gated", DedupeKey: "after"})
			require.NoError(t, err, "the dispatched memo is the Gate: /gated is live")
		})
	}
}
