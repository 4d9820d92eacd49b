package sqlite

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// queryPlan is SQLite's EXPLAIN QUERY PLAN for query, one detail a line, for
// the tests that assert hot queries search an index instead of scanning.
func queryPlan(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.r.Query(`EXPLAIN QUERY PLAN `+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		lines = append(lines, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}
