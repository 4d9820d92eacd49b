package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

func openBench(tb testing.TB) *DB {
	tb.Helper()
	db, err := Open(context.Background(), Config{Path: filepath.Join(tb.TempDir(), "bench.db"), Sync: "normal"})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })
	return db
}

// seedSessions bulk-inserts n sessions in one statement: 20% user, 20%
// channel, 10% api, 10% agent, 40% workflow; 1 in 20 archived, 1 in 23 empty;
// activity one second apart.
func seedSessions(tb testing.TB, db *DB, n int) {
	tb.Helper()
	_, err := db.w.Exec(`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
		INSERT INTO sessions (id, title, origin, platform, tags, policy, base_policy, archived, event_count, last_active_at, created_at)
		SELECT printf('ses_%08d', i), 'Session ' || i,
			CASE i % 10 WHEN 0 THEN 'user' WHEN 1 THEN 'user' WHEN 2 THEN 'channel' WHEN 3 THEN 'channel'
				WHEN 4 THEN 'api' WHEN 5 THEN 'agent' ELSE 'workflow' END,
			CASE WHEN i % 10 IN (2, 3) THEN 'slack' ELSE '' END,
			CASE WHEN i % 10 IN (2, 3) THEN '["slack:C1:' || i || '"]' ELSE '[]' END,
			'auto', 'auto', i % 20 = 7, CASE WHEN i % 23 = 0 THEN 0 ELSE 1 + i % 5 END,
			strftime('%Y-%m-%dT%H:%M:%S.000000Z', 1767225600 + i, 'unixepoch'),
			strftime('%Y-%m-%dT%H:%M:%S.000000Z', 1767225600 + i, 'unixepoch')
		FROM c`, n)
	require.NoError(tb, err)
}

// seedEvents bulk-inserts n events into one new session, 1 µs apart.
func seedEvents(tb testing.TB, db *DB, n int) *store.Session {
	tb.Helper()
	ses, err := db.SessionCreate(context.Background(), &store.SessionCreateParams{Origin: store.OriginUser, Policy: store.PolicyAuto})
	require.NoError(tb, err)
	_, err = db.w.Exec(`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
		INSERT INTO session_events (session_id, ts, type, actor, payload)
		SELECT ?, strftime('%Y-%m-%dT%H:%M:%S', 1767225600 + i / 1000000, 'unixepoch') || printf('.%06dZ', i % 1000000),
			CASE WHEN i % 2 = 0 THEN 'user_message' ELSE 'assistant_message' END, 'user:u',
			'{"text":"message ' || i || '"}'
		FROM c`, n, ses.ID)
	require.NoError(tb, err)
	_, err = db.w.Exec(`UPDATE sessions SET event_count = ? WHERE id = ?`, n, ses.ID)
	require.NoError(tb, err)
	return ses
}

func eventTS(i int) time.Time {
	return time.Unix(1767225600+int64(i/1_000_000), int64(i%1_000_000)*1000).UTC()
}

// listingCursor is the keyset position after the first depth rows of the
// user+channel listing.
func listingCursor(tb testing.TB, db *DB, depth int) *store.SessionCursor {
	tb.Helper()
	var ts, id string
	require.NoError(tb, db.r.QueryRow(`SELECT last_active_at, id FROM sessions
		WHERE origin IN ('user', 'channel') AND archived = 0 AND event_count > 0
		ORDER BY last_active_at DESC, id DESC LIMIT 1 OFFSET ?`, depth-1).Scan(&ts, &id))
	return &store.SessionCursor{LastActiveAt: parseTime(ts), ID: id}
}

func BenchmarkSessionList100k(b *testing.B) {
	ctx := context.Background()
	db := openBench(b)
	seedSessions(b, db, 100_000)
	userChannel := []string{store.OriginUser, store.OriginChannel}
	for _, bc := range []struct {
		name string
		p    store.SessionListParams
	}{
		{"FirstPage", store.SessionListParams{Origins: userChannel, Limit: 51}},
		{"DeepPage", store.SessionListParams{Origins: userChannel, Limit: 51, After: listingCursor(b, db, 30_000)}},
		{"RareOriginFirstPage", store.SessionListParams{Origins: []string{store.OriginAgent}, Limit: 51}},
		{"TextFilterRare", store.SessionListParams{Origins: userChannel, Limit: 1, Query: "Session 4242"}},
		{"TextFilterCommon", store.SessionListParams{Origins: userChannel, Limit: 51, Query: "Session 1"}},
		{"AllOriginsDeepPage", store.SessionListParams{Origins: []string{"user", "channel", "workflow", "api", "agent"}, Limit: 51,
			After: listingCursor(b, db, 30_000)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				got, err := db.SessionList(ctx, &bc.p)
				require.NoError(b, err)
				require.Len(b, got, bc.p.Limit)
			}
		})
	}
}

func BenchmarkEventsAfter1M(b *testing.B) {
	ctx := context.Background()
	db := openBench(b)
	ses := seedEvents(b, db, 1_000_000)
	for _, bc := range []struct {
		name  string
		after time.Time
		want  int
	}{
		{"FromStart", time.Time{}, 200},
		{"Middle", eventTS(500_000), 200},
		{"Tail", eventTS(999_799), 200},
		{"NothingNew", eventTS(999_999), 0}, // the usual poll of a quiet session
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				got, err := db.EventList(ctx, &store.EventListParams{SessionID: ses.ID, After: bc.after, Limit: 200})
				require.NoError(b, err)
				require.Len(b, got, bc.want)
			}
		})
	}
}

// TestSessionQueriesUseIndexes asserts the listing and `after` polling never
// scan a table: each is a SEARCH of an index (SPEC §2: no table scans on hot
// paths).
func TestSessionQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := openBench(t)
	seedSessions(t, db, 2_000)
	ses := seedEvents(t, db, 2_000)

	plan := func(query string, args []any) string { return queryPlan(t, db, query, args...) }
	cursor := &store.SessionCursor{LastActiveAt: time.Now(), ID: "ses_x"}
	for name, p := range map[string]*store.SessionListParams{
		"Default":       {Origins: []string{store.OriginUser, store.OriginChannel}, Limit: 51},
		"DeepPage":      {Origins: []string{store.OriginUser, store.OriginChannel}, Limit: 51, After: cursor},
		"OneOrigin":     {Origins: []string{store.OriginAgent}, Limit: 51, After: cursor},
		"ArchivedQuery": {Origins: []string{"user", "channel", "workflow", "api", "agent"}, IncludeArchived: true, Query: "x", Limit: 51},
	} {
		q, args := sessionListQuery(p)
		got := plan(q, args)
		t.Logf("listing %s:\n%s", name, got)
		require.NotRegexp(t, `SCAN sessions\b`, got, "listing %s:\n%s", name, got)
		require.Contains(t, got, "SEARCH sessions USING INDEX sessions_listing", "listing %s:\n%s", name, got)
	}
	// A text filter walks the trigram index newest minute first, fetching
	// each match by rowid; the bound on minutes is computed once per query.
	for name, p := range map[string]*store.SessionListParams{
		"Search":         {Origins: []string{"user", "channel"}, Query: "Session 42", Limit: 51},
		"SearchDeepPage": {Origins: []string{"user", "channel"}, Query: "Session 42", Limit: 51, After: cursor},
	} {
		q, args := sessionListQuery(p)
		got := plan(q, args)
		t.Logf("listing %s:\n%s", name, got)
		require.NotRegexp(t, `SCAN (sessions|s|s2)\b`, got, "listing %s:\n%s", name, got)
		require.Contains(t, got, "SEARCH s USING INTEGER PRIMARY KEY (rowid=?)", "listing %s:\n%s", name, got)
		require.Contains(t, got, "SEARCH s2 USING INTEGER PRIMARY KEY (rowid=?)", "listing %s:\n%s", name, got)
		require.Contains(t, got, "VIRTUAL TABLE INDEX", "listing %s:\n%s", name, got)
		require.NotContains(t, got, "CORRELATED", "listing %s:\n%s", name, got)
	}
	holds := plan(openHoldsQuery(2), []any{store.HoldOpen, "ses_a", "ses_b"})
	t.Logf("open holds:\n%s", holds)
	require.Contains(t, holds, "SEARCH holds USING", "open holds per page:\n%s", holds)

	for name, p := range map[string]*store.EventListParams{
		"After":       {SessionID: ses.ID, After: eventTS(1000), Limit: 100},
		"FromStart":   {SessionID: ses.ID, Limit: 100},
		"Newest":      {SessionID: ses.ID, Newest: true, Limit: 100},
		"LastSummary": {SessionID: ses.ID, Types: []string{store.EventCompactSummary}, Newest: true, Limit: 1},
	} {
		q, args := eventListQuery(p)
		got := plan(q, args)
		t.Logf("events %s:\n%s", name, got)
		require.NotContains(t, got, "SCAN session_events", "events %s:\n%s", name, got)
		require.Contains(t, got, "SEARCH session_events USING INDEX", "events %s:\n%s", name, got)
		require.NotContains(t, got, "TEMP B-TREE", "events %s come in index order:\n%s", name, got)
	}
}
