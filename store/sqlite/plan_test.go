package sqlite

import (
	"context"
	"path/filepath"
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

// TestPlansIgnoreBoundValues: a plan depends on the SQL and the schema, not
// on the values bound (see settings.go). The probe is the case SQLite would
// otherwise plan by value: status = ? bound to 'pending' is then known to
// match the partial index, and the statement is prepared again on each
// bind to check.
func TestPlansIgnoreBoundValues(t *testing.T) {
	t.Parallel()
	require.Zero(t, qpsgRC, "sqlite3_auto_extension")
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	_, err = db.w.Exec(`CREATE TABLE probe (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
		CREATE INDEX probe_pending ON probe (id) WHERE status = 'pending'`)
	require.NoError(t, err)
	require.Contains(t, queryPlan(t, db, `SELECT id FROM probe WHERE status = 'pending' ORDER BY id`), "probe_pending",
		"the literal matches the partial index")
	require.NotContains(t, queryPlan(t, db, `SELECT id FROM probe WHERE status = ? ORDER BY id`, "pending"), "probe_pending",
		"a bound value is not looked at")
}
