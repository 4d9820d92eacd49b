package sqlite

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

var bareScan = regexp.MustCompile(`(?m)^SCAN (\w+)$`)

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
	runSearch := func(p *store.RunListParams, want string) planCase {
		from, args := runSearchMatches(p, "otters", false)
		return planCase{`SELECT f.rowid, r.rowid` + from + ` ORDER BY f.rowid`, args, want}
	}
	runCounts := func(p *store.RunCountParams, want string) planCase {
		q, args := runCountsQuery(p, 1001)
		return planCase{q, args, want}
	}
	holdCount := func(p *store.HoldListParams, want string) planCase {
		q, args := holdCountOpenQuery(p)
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
		"HoldsOfRun":        {holdsOfRunQuery, []any{"r"}, "holds_run"},
		"HoldAudit":         {`SELECT id FROM hold_decisions WHERE hold_id = ? ORDER BY id`, []any{"h"}, "hold_decisions_hold"},
		"QueueCountsByStat": {`SELECT status, COUNT(*) FROM workflow_queue_items GROUP BY status`, nil, "queue_items_status"},

		// The console's filters (SPEC §6 Runs and Holds, §7 GET /api/runs).
		"RunsOfWorkflow":              runs(&store.RunListParams{Command: "/w"}, "runs_command"),
		"RunsOfWorkflowPaged":         runs(&store.RunListParams{Command: "/w", After: after}, "runs_command"),
		"RunsOfWorkflowByStatus":      runs(&store.RunListParams{Command: "/w", Status: "failed"}, "runs_command"),
		"RunsOfWorkflowByStatusPaged": runs(&store.RunListParams{Command: "/w", Status: "failed", After: after}, "runs_command"),
		"RunsShortText":               runs(&store.RunListParams{Query: "ot"}, "runs_created"),
		"RunsShortTextOfWorkflow":     runs(&store.RunListParams{Query: "ot", Command: "/w"}, "runs_command"),
		"RunsOfSessionAndWorkflow":    runs(&store.RunListParams{SessionID: "s", Command: "/w"}, "runs_session"),
		"RunsTextMatches":             runSearch(&store.RunListParams{}, "VIRTUAL TABLE INDEX"),
		"RunsTextMatchesPaged":        runSearch(&store.RunListParams{Status: "failed", Command: "/w", After: after}, "VIRTUAL TABLE INDEX"),
		"RunsTextPage":                {runSearchPageQuery, []any{"[1,2]", 5}, "PRIMARY KEY"},
		"RunCountsOfSession":          runCounts(&store.RunCountParams{SessionID: "s"}, "runs_session"),
		"RunCountsShortText":          runCounts(&store.RunCountParams{Query: "ot"}, "runs_created"),
		"RunCountsText":               runCounts(&store.RunCountParams{Query: "otters"}, "VIRTUAL TABLE INDEX"),
		"RunCountsKept":               {`SELECT status, n FROM run_counts WHERE command = ?`, []any{"/w"}, "PRIMARY KEY"},
		"RunHourCounts":               {runHourCountsQuery, []any{"2024-01-01T00"}, "PRIMARY KEY"},
		"RunsOfMemo":                  {runsByDispatchQuery, []any{"mem_x", 5}, "runs_dispatch_memo"},
		"OpenHoldsOfWorkflow":         holds(&store.HoldListParams{Status: "open", Command: "/w"}, "holds_open_command"),
		"OpenHoldsOfWorkflowPaged":    holds(&store.HoldListParams{Status: "open", Command: "/w", After: after}, "holds_open_command"),
		"OpenHoldsOfRequester":        holds(&store.HoldListParams{Status: "open", OwnerUID: "user:u"}, "holds_open_owner"),
		"DecidedHolds":                holds(&store.HoldListParams{Decided: true}, "holds_decided"),
		"DecidedHoldsPagedByTime":     holds(&store.HoldListParams{Decided: true, After: after}, "holds_decided"),
		"DecidedHoldsOfWorkflow":      holds(&store.HoldListParams{Decided: true, Command: "/w"}, "holds_decided_command"),
		"DecidedHoldsOfRequester":     holds(&store.HoldListParams{Decided: true, OwnerUID: "user:u", After: after}, "holds_decided_owner"),
		"OpenHoldCountOfWorkflow":     holdCount(&store.HoldListParams{Command: "/w"}, "holds_open_command"),
		"OpenHoldCountOfRequester":    holdCount(&store.HoldListParams{OwnerUID: "user:u"}, "holds_open_owner"),
		// A claim names its items: the primary key finds them, not a walk
		// of every pending item (the backlog under a burst).
		"Claim":          {claimQuery(3), []any{"t", "a", "b", "c"}, "sqlite_autoindex_workflow_queue_items_1"},
		"QueueItemsByID": {`SELECT id FROM workflow_queue_items WHERE id IN (SELECT value FROM json_each(?))`, []any{`["a"]`}, "sqlite_autoindex_workflow_queue_items_1"},
	} {
		got := plan(tc.query, tc.args...)
		require.Contains(t, got, tc.want, "%s:\n%s", name, got)
		if !strings.Contains(name, "OfSession") && !strings.HasPrefix(name, "RunCounts") && !strings.HasPrefix(name, "RunsTextPage") &&
			name != "RunsOfWorkflow" && name != "RunsOfWorkflowPaged" && name != "RunsShortTextOfWorkflow" {
			// A session has a handful of runs and holds, a text page a
			// limit's worth of candidates, and each status range of a
			// workflow's listing at most a limit's worth of keys to merge:
			// sorting them is free; counts group a bounded visit.
			require.NotContains(t, got, "TEMP B-TREE", "%s sorts:\n%s", name, got)
		}
		if strings.HasSuffix(name, "Paged") && !strings.HasPrefix(name, "RunsText") { // the cursor bounds the index range; no rows before it are read
			require.Regexp(t, `\((created|decided)_at,id\)`, got, "%s:\n%s", name, got)
		}
		// Walking an index (a partial one, or newest-first under a LIMIT)
		// is fine; a bare table scan is not.
		// (A merged page of keys, "page", is at most a limit's worth of rows.)
		for _, m := range bareScan.FindAllStringSubmatch(got, -1) {
			require.Equal(t, "page", m[1], "%s scans:\n%s", name, got)
		}
	}
}
