package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStewardQueriesUseIndexes: the maintenance pass's reminder scan and an
// App Home's runs read an index, never scan or sort holds or runs.
func TestStewardQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	for _, tc := range []struct {
		name  string
		query string
		args  []any
		want  string
	}{
		{"RemindDue", remindDueQuery, []any{"t", 5}, "holds_remind"},
		{"RunsByOwner", runsByOwnerQuery, []any{"slack:U1", 10}, "runs_owner_created"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := queryPlan(t, db, tc.query, tc.args...)
			require.Contains(t, got, tc.want, got)
			require.NotContains(t, got, "TEMP B-TREE", got)
			require.NotRegexp(t, `(?m)^SCAN \w+$`, got)
		})
	}
}
