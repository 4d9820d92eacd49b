package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
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
	type planCase struct {
		query string
		args  []any
		want  string
	}
	// The listings are checked as RunList and HoldList build them, first
	// pages and keyset continuations alike.
	after := &store.ListCursor{CreatedAt: time.Now(), ID: "x"}
	runs := func(p *store.RunListParams, want string) planCase {
		q, args := runListQuery(p)
		return planCase{q, args, want}
	}
	holds := func(p *store.HoldListParams, want string) planCase {
		q, args := holdListQuery(p)
		return planCase{q, args, want}
	}
	for name, tc := range map[string]planCase{
		"Pending":           {pendingQuery, []any{3}, "queue_items_status"},
		"PendingCount":      {pendingCountQuery, nil, "queue_items_status"},
		"StuckRuns":         {stuckRunsQuery, []any{"t", 5}, "runs_stuck"},
		"ApprovedRuns":      {approvedRunsQuery, []any{5}, "runs_approved"},
		"ExpiredHolds":      {expiredHoldsQuery, []any{"t", 5}, "holds_status_expiry"},
		"RunsByStatus":      runs(&store.RunListParams{Status: "running"}, "runs_status_created"),
		"RunsByStatusPaged": runs(&store.RunListParams{Status: "running", After: after}, "runs_status_created"),
		"RunsNewest":        runs(&store.RunListParams{}, "runs_created"),
		"RunsNewestPaged":   runs(&store.RunListParams{After: after}, "runs_created"),
		"RunsOfSession":     runs(&store.RunListParams{SessionID: "s", Status: "running"}, "runs_session"),
		"OpenHolds":         holds(&store.HoldListParams{Status: "open"}, "holds_status_created"),
		"OpenHoldsPaged":    holds(&store.HoldListParams{Status: "open", After: after}, "holds_status_created"),
		"DecidedHoldsPaged": holds(&store.HoldListParams{Status: "approved", After: after}, "holds_status_created"),
		"HoldsHistory":      holds(&store.HoldListParams{}, "holds_created"),
		"HoldsHistoryPaged": holds(&store.HoldListParams{After: after}, "holds_created"),
		"HoldsOfSession":    holds(&store.HoldListParams{SessionID: "s", Status: "open"}, "holds_session"),
		"HoldAudit":         {`SELECT id FROM hold_decisions WHERE hold_id = ? ORDER BY id`, []any{"h"}, "hold_decisions_hold"},
		"QueueCountsByStat": {`SELECT status, COUNT(*) FROM workflow_queue_items GROUP BY status`, nil, "queue_items_status"},
	} {
		got := plan(tc.query, tc.args...)
		require.Contains(t, got, tc.want, "%s:\n%s", name, got)
		if !strings.HasSuffix(name, "OfSession") { // a session has a handful of runs and holds; sorting them is free
			require.NotContains(t, got, "TEMP B-TREE", "%s sorts:\n%s", name, got)
		}
		if strings.HasSuffix(name, "Paged") { // the cursor bounds the index range; no rows before it are read
			require.Contains(t, got, "(created_at,id)", "%s:\n%s", name, got)
		}
		// Walking an index (a partial one, or newest-first under a LIMIT)
		// is fine; a bare table scan is not.
		require.NotRegexp(t, `(?m)^SCAN \w+$`, got, "%s scans:\n%s", name, got)
	}
}
