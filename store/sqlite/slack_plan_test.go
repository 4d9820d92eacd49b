package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlackQueriesUseIndexes: the bridge's polling queries use indexes
// (partial indexes holding only pending rows, the events primary key), never
// scan a table that grows with history.
func TestSlackQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := openBench(t)
	plan := func(query string, args ...any) string { return queryPlan(t, db, query, args...) }
	now := formatTime(time.Now())
	for name, tc := range map[string]struct {
		query string
		args  []any
		want  []string
	}{
		"InboxPending":  {inboxPendingQuery, []any{50}, []string{"slack_inbox_pending_thread"}},
		"InboxClaim":    {inboxClaimQuery, []any{"r1", now, now, 50}, []string{"slack_inbox_heads"}},
		"InboxAdd":      {inboxAddQuery, []any{"k", "event", "{}", now, "C1:1"}, []string{"slack_inbox_pending_thread (thread=?)"}},
		"InboxNextHead": {inboxNextHeadQuery, []any{1}, []string{"slack_inbox_pending_thread (thread=?)"}},
		"OutboxClaim":   {outboxClaimQuery, []any{"r1", now, now, now, 50}, []string{"slack_outbox_heads"}},
		"OutboxNextDue": {outboxNextDueQuery, nil, []string{"slack_outbox_heads"}},
		"OutboxAdd": {outboxAddQuery, []any{"k", "C1:1", "chat.postMessage", "C1", "", "", "x", "", "", "", now, ""},
			[]string{"slack_outbox_pending_queue (queue=?)"}},
		"OutboxNextHead": {outboxNextHeadQuery, []any{1}, []string{"slack_outbox_pending_queue (queue=?)"}},
		"MirrorEvents":   {mirrorEventsQuery, []any{10, 100}, []string{"SEARCH e USING INTEGER PRIMARY KEY (rowid>?)", "session_tags"}},
		"BackfillDue":    {backfillDueQuery, []any{now, 10}, []string{"slack_backfills_due (next_at<?)"}},
		"BackfillNext":   {backfillNextDueQuery, nil, []string{"slack_backfills_due"}},
	} {
		got := plan(tc.query, tc.args...)
		t.Logf("%s:\n%s", name, got)
		for _, w := range tc.want {
			require.Contains(t, got, w, "%s:\n%s", name, got)
		}
		// Walking a partial index of pending rows is fine; a bare table scan is not.
		require.NotRegexp(t, `(?m)SCAN \w+$`, got, "%s:\n%s", name, got)
	}
}
