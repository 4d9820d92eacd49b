package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite/sqlitetest"
)

// TestInsightQueriesUseIndexes: usage and edges read their windows through
// indexes (usage_hourly's key, runs_created and the partial edge indexes),
// never a scan of runs, holds, decisions, deliveries or events.
func TestInsightQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	ts := formatTime(time.Now())
	for name, tc := range map[string]struct {
		query string
		args  []any
		want  []string
	}{
		"UsageByWorkflow": {fmt.Sprintf(usageQuery, "command"), []any{"workflow", "h", ts, ts, 10}, []string{"usage_hourly", "runs_created"}},
		"UsageBySession":  {fmt.Sprintf(usageQuery, "session_id"), []any{"session", "h", ts, ts, 10}, []string{"usage_hourly", "runs_created"}},
		"UsageByModel":    {fmt.Sprintf(usageQuery, "model"), []any{"model", "h", ts, ts, 10}, []string{"usage_hourly", "runs_created"}},
		"RunCounts":       {edgeRunCounts, []any{ts}, []string{"runs_failed"}},
		"RunLatest":       {edgeRunLatest, []any{"guard", ts, 5}, []string{"runs_failed"}},
		"HoldCount":       {edgeHoldCount, []any{ts}, []string{"holds_timed_out"}},
		"HoldLatest":      {edgeHoldLatest, []any{ts, 5}, []string{"holds_timed_out"}},
		"RefusedCount":    {edgeRefusedCount, []any{ts}, []string{"hold_decisions_refused"}},
		"RefusedLatest":   {edgeRefusedLatest, []any{ts, 5}, []string{"hold_decisions_refused"}},
		"Workflows":       {edgeWorkflows, nil, []string{"workflows_broken"}},
		"SlackCount":      {edgeSlackCount, []any{ts}, []string{"slack_inbox_errors"}},
		"SlackLatest":     {edgeSlackLatest, []any{ts, 5}, []string{"slack_inbox_errors"}},
		"TurnCount":       {edgeTurnCount, []any{ts}, []string{"session_events_turn_errors"}},
		"TurnLatest":      {edgeTurnLatest, []any{ts, 5}, []string{"session_events_turn_errors"}},
	} {
		t.Run(name, func(t *testing.T) {
			plan := queryPlan(t, db, tc.query, tc.args...)
			for _, idx := range tc.want {
				require.Contains(t, plan, idx, plan)
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "USING") && !strings.HasPrefix(line, "SCAN (") {
					t.Fatalf("%s scans a table:\n%s", name, plan)
				}
			}
		})
	}
}

// TestUpgradeKeepsHoldsAndCountsEarlierUsage applies the migrations before
// 018 (traces, usage, holds per gate) to a database holding a held run, writes its history as the older
// binary did, then opens it: the rebuilt holds table keeps the hold, the run's
// tokens are read back from its steps and usage counts it.
func TestUpgradeKeepsHoldsAndCountsEarlierUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite3", "file:"+path+"?_foreign_keys=on&_journal_mode=WAL")
	require.NoError(t, err)
	ms, err := loadMigrations()
	require.NoError(t, err)
	_, err = raw.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`)
	require.NoError(t, err)
	for _, m := range ms {
		if m.version >= 18 {
			break
		}
		_, err := raw.Exec(m.sql)
		require.NoError(t, err, m.name)
		_, err = raw.Exec(`INSERT INTO schema_migrations VALUES (?, ?, '')`, m.version, m.name)
		require.NoError(t, err)
	}
	now := formatTime(time.Now())
	for _, q := range []string{
		`INSERT INTO memos (id, title, body, memo_type, content_hash, created_at, updated_at) VALUES ('mem_w', 'W', 'w', 'workflow', 'h', '` + now + `', '` + now + `')`,
		`INSERT INTO sessions (id, origin, last_active_at, created_at) VALUES ('ses_1', 'user', '` + now + `', '` + now + `')`,
		`INSERT INTO workflow_queue_items (id, workflow_memo_id, command, dedupe_key, status, run_id, session_id, created_at)
			VALUES ('itm_1', 'mem_w', '/w', 'k', 'claimed', 'run_1', 'ses_1', '` + now + `')`,
		`INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command, session_id, status, manifest, steps, hold_id, heartbeat_at, created_at, updated_at)
			VALUES ('run_1', 'itm_1', 'mem_w', '/w', 'ses_1', 'suspended', '{"policy":{"model":"openai:m"}}',
			'[{"kind":"context","tokensIn":0,"tokensOut":0},{"kind":"process","tokensIn":12,"tokensOut":30}]', 'hld_1', '` + now + `', '` + now + `', '` + now + `')`,
		`INSERT INTO holds (id, run_id, item_id, session_id, command, gate_label, status, output, created_at)
			VALUES ('hld_1', 'run_1', 'itm_1', 'ses_1', '/w', 'Review', 'open', 'the draft', '` + now + `')`,
	} {
		_, err := raw.Exec(q)
		require.NoError(t, err, q)
	}
	require.NoError(t, raw.Close())

	db, err := Open(ctx, Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	h, err := db.HoldGetByID(ctx, "hld_1")
	require.NoError(t, err)
	require.Equal(t, []string{"run_1", store.HoldOpen, "the draft", "Review"}, []string{h.RunID, h.Status, h.Output, h.GateLabel})
	r, err := db.RunGetByID(ctx, "run_1")
	require.NoError(t, err)
	require.Equal(t, []any{"openai:m", int64(12), int64(30)}, []any{r.Model, r.TokensIn, r.TokensOut})
	u, err := db.UsageList(ctx, &store.UsageListParams{GroupBy: store.UsageByModel})
	require.NoError(t, err)
	require.Equal(t, []*store.Usage{{Key: "openai:m", Runs: 1, TokensIn: 12, TokensOut: 30}}, u)
}

// seededInsight is a store holding 100,000 runs over 30 days (see
// sqlitetest.Seed), shared by the insight benchmarks.
func seededInsight(b *testing.B) *DB {
	b.Helper()
	path := filepath.Join(b.TempDir(), "insight.db")
	db, err := Open(context.Background(), Config{Path: path, Sync: "normal"})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, db.Close()) })
	sqlitetest.Seed(b, path, sqlitetest.History{Runs: 100_000})
	return db
}

// BenchmarkInsight reads usage and edges over 100,000 runs: the 7-day
// window the API defaults to, and usage over all time.
func BenchmarkInsight(b *testing.B) {
	db := seededInsight(b)
	ctx := context.Background()
	week := time.Now().Add(-7 * 24 * time.Hour)
	for _, g := range []string{store.UsageByWorkflow, store.UsageBySession, store.UsageByModel} {
		for name, since := range map[string]time.Time{"7d": week, "all": {}} {
			b.Run("Usage/"+g+"/"+name, func(b *testing.B) {
				for b.Loop() {
					if _, err := db.UsageList(ctx, &store.UsageListParams{GroupBy: g, Since: since}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	b.Run("Edges/7d", func(b *testing.B) {
		for b.Loop() {
			edges, err := db.EdgeList(ctx, &store.EdgeListParams{Since: week})
			if err != nil {
				b.Fatal(err)
			}
			if len(edges) < 10 {
				b.Fatalf("want every seeded kind, have %d", len(edges))
			}
		}
	})
}
