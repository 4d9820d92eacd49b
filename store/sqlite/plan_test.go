package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// TestNoBareLimitParameter: no query binds its limit as a bare LIMIT ?,
// which SQLite prepares afresh on every bind (see the statement cache in
// Open); LIMIT +? is the same limit without that.
func TestNoBareLimitParameter(t *testing.T) {
	t.Parallel()
	bare := regexp.MustCompile(`(?i)\bLIMIT\s+\?`)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			if bare.MatchString(line) {
				found = append(found, fmt.Sprintf("%s:%d: %s", f, i+1, strings.TrimSpace(line)))
			}
		}
	}
	require.Empty(t, found, "write LIMIT +? instead")
}
