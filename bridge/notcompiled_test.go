package bridge_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine/library"
)

// TestEnqueueRefusalsSayWhy: a mention naming a workflow that takes no work
// is answered in the thread with the reason; one whose memo does not compile
// names its first error and line and links the workflow's console page.
func TestEnqueueRefusalsSayWhy(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	lib := library.New(tb.store, discard())
	lineOf := func(doc, s string) int { return 1 + strings.Count(doc[:strings.Index(doc, s)], "\n") }
	imp := func(doc string) string {
		m, _, err := lib.ImportWorkflow(tb.ctx, "", doc)
		require.NoError(t, err)
		return m.ID
	}
	oneError := strings.NewReplacer("/draft-memo", "/broken-one", "`memo`", "`worktree`").Replace(draftMemo(t))
	threeErrors := strings.NewReplacer("/draft-memo", "/broken-three", "`memo`", "`worktree`", "`hold`", "`maybe`", "`2m`", "`soon`").Replace(draftMemo(t))
	oneID, threeID := imp(oneError), imp(threeErrors)
	imp(strings.NewReplacer("/draft-memo", "/resting", "`live`", "`paused`").Replace(draftMemo(t)))

	for i, tc := range []struct {
		name, text string
		want       []string
		notWant    string
	}{
		{"DoesNotCompile", "broken-one Otters", []string{
			"Workflow `broken-one` does not compile",
			fmt.Sprintf("Line %d: destination worktree is not supported; use memo or reply.", lineOf(oneError, "worktree")),
			"<http://holdfast.test/workflows/" + oneID + "|its workflow page>",
		}, "not live"},
		{"FirstOfSeveral", "run broken-three Herons", []string{
			"Workflow `broken-three` does not compile",
			fmt.Sprintf("Line %d: bad Approval", lineOf(threeErrors, "maybe")),
			"(and 2 more errors)",
			"http://holdfast.test/workflows/" + threeID,
		}, "not live"},
		{"Paused", "resting Otters", []string{"I can't run `resting`: workflow /resting is paused, not live"}, "compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tb.ts()
			tb.event(t, fmt.Sprint("EvNC", i), mention("CNC", "U1", root, "", tc.text))
			c := tb.waitPost(t, "CNC", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), tc.want[0]) })
			for _, w := range tc.want {
				require.Contains(t, text(c), w)
			}
			require.NotContains(t, text(c), tc.notWant)
		})
	}
	// The slash command answers at once with the same reason.
	status, body := tb.slash(t, "U1", "CNC", "run broken-one Otters")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, unescapeJSON(body), "Workflow `broken-one` does not compile")
	require.Contains(t, unescapeJSON(body), fmt.Sprintf("Line %d:", lineOf(oneError, "worktree")))
	tb.quiet(t)
	pending, err := tb.store.QueueItemCountPending(tb.ctx)
	require.NoError(t, err)
	require.Zero(t, pending, "nothing was queued")
}
