package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkflowNameQueriesUseIndexes: the lookups every memo write makes
// (dispatch included) to keep workflow indexes current are index probes,
// whatever the size of the library.
func TestWorkflowNameQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	for _, tc := range []struct {
		name, query string
		args        []any
		want        []string
	}{
		{"WorkflowsNaming", workflowsNamingQuery(3), []any{"a", "b", "c"}, []string{"workflow_names_name"}},
		{"MemoNamed", memoNamedQuery, []any{"a"}, []string{"memos_title", "sqlite_autoindex_memos_1 (id=?)"}},
		{"MemoIDsNamed", memoIDsNamedQuery, []any{"a"}, []string{"memos_title", "sqlite_autoindex_memos_1 (id=?)"}},
	} {
		got := queryPlan(t, db, tc.query, tc.args...)
		for _, w := range tc.want {
			require.Contains(t, got, w, "%s:\n%s", tc.name, got)
		}
		require.NotRegexp(t, `(?m)SCAN (memos|workflow_names)\b`, got, "%s scans:\n%s", tc.name, got)
	}
}
