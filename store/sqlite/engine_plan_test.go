package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEngineQueriesUseIndexes: every query the runner, the API and the
// console make of queue items, runs and holds is served by an index, never
// a scan or a sort of a table that grows with history.
func TestEngineQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	plan := func(query string, args ...any) string { return queryPlan(t, db, query, args...) }
	for name, tc := range map[string]struct {
		query string
		args  []any
		want  string
	}{
		"Claim":             {claimQuery, []any{"t", 3}, "queue_items_status"},
		"PendingCount":      {pendingCountQuery, nil, "queue_items_status"},
		"StuckRuns":         {stuckRunsQuery, []any{"t", 5}, "runs_stuck"},
		"ApprovedRuns":      {approvedRunsQuery, []any{5}, "runs_approved"},
		"ExpiredHolds":      {expiredHoldsQuery, []any{"t", 5}, "holds_status_expiry"},
		"RunsByStatus":      {`SELECT ` + runColumns + runFrom + ` WHERE r.status = ? ORDER BY r.created_at DESC LIMIT ?`, []any{"running", 5}, "runs_status_created"},
		"RunsNewest":        {`SELECT ` + runColumns + runFrom + ` ORDER BY r.created_at DESC LIMIT ?`, []any{5}, "runs_created"},
		"RunsOfSession":     {`SELECT ` + runColumns + runFromBySession + ` WHERE r.session_id = ? AND r.status = ? ORDER BY r.created_at DESC LIMIT ?`, []any{"s", "running", 5}, "runs_session"},
		"OpenHolds":         {`SELECT ` + holdColumns + ` FROM holds WHERE status = ? ORDER BY created_at LIMIT ?`, []any{"open", 5}, "holds_status_created"},
		"HoldsHistory":      {`SELECT ` + holdColumns + ` FROM holds ORDER BY created_at DESC LIMIT ?`, []any{5}, "holds_created"},
		"HoldsOfSession":    {`SELECT ` + holdColumns + ` FROM holds INDEXED BY holds_session WHERE session_id = ? AND status = ? ORDER BY created_at LIMIT ?`, []any{"s", "open", 5}, "holds_session"},
		"HoldAudit":         {`SELECT id FROM hold_decisions WHERE hold_id = ? ORDER BY id`, []any{"h"}, "hold_decisions_hold"},
		"QueueCountsByStat": {`SELECT status, COUNT(*) FROM workflow_queue_items GROUP BY status`, nil, "queue_items_status"},
	} {
		got := plan(tc.query, tc.args...)
		require.Contains(t, got, tc.want, "%s:\n%s", name, got)
		if !strings.HasSuffix(name, "OfSession") { // a session has a handful of runs and holds; sorting them is free
			require.NotContains(t, got, "TEMP B-TREE", "%s sorts:\n%s", name, got)
		}
		// Walking an index (a partial one, or newest-first under a LIMIT)
		// is fine; a bare table scan is not.
		require.NotRegexp(t, `(?m)^SCAN \w+$`, got, "%s scans:\n%s", name, got)
	}
}
