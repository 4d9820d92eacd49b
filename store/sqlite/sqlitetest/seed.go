// Package sqlitetest is the SQLite benchmarks' support. It seeds stores with
// history at a scale the store methods would take minutes to write one by
// one, for benchmarks of the queries that read it, writing rows as the store
// would, with raw SQL, to a database the store has already migrated; and it
// measures the disk's single-row commit rate that write benchmarks are read
// against.
package sqlitetest

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the driver store/sqlite uses
)

// History describes what Seed writes.
type History struct {
	// Runs spread evenly over Span ending at End (default: now, 30 days).
	Runs      int
	Span      time.Duration
	End       time.Time
	Workflows int // default 20
	Sessions  int // default 2,000
}

// RunKinds are the error kinds of the failed tenth of the seeded runs, in
// turn; recovery_exhausted runs have that status too.
var RunKinds = []string{"guard", "model", "dispatch_conflict", "dispatch", "timeout", "compile", "load", "recovery_exhausted"}

// Seed writes h into the SQLite database at path: workflow memos /wf0…,
// sessions, one queue item and one run per run (nine in ten succeeded, the
// tenth failed with RunKinds in turn), tokens per run (so usage_hourly is
// kept by its trigger), a hold for one run in 20 (one in ten of them decided
// by timeout, one refused decision attempt for each), two workflows that do
// not compile, Slack deliveries (one in 20 set aside with an error) and
// chat replies (one in ten an error).
func Seed(tb testing.TB, path string, h History) {
	tb.Helper()
	if h.Span <= 0 {
		h.Span = 30 * 24 * time.Hour
	}
	if h.End.IsZero() {
		h.End = time.Now()
	}
	if h.Workflows <= 0 {
		h.Workflows = 20
	}
	if h.Sessions <= 0 {
		h.Sessions = 2000
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_foreign_keys=on&_busy_timeout=10000&_journal_mode=WAL")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	start := h.End.Add(-h.Span).UTC()
	step := float64(h.Span.Microseconds()) / float64(max(h.Runs, 1))
	// Times are computed in SQL from the run's index: start + i * step µs,
	// formatted as the store formats them.
	at := func(col string, extraMicros string) string {
		return fmt.Sprintf(`strftime('%%Y-%%m-%%dT%%H:%%M:%%S', %d + CAST((%s * %f + %s) / 1000000 AS INTEGER), 'unixepoch')
			|| printf('.%%06dZ', CAST(%s * %f + %s AS INTEGER) %% 1000000)`,
			start.Unix(), col, step, extraMicros, col, step, extraMicros)
	}
	stmts := []struct {
		q    string
		args []any
	}{
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
			INSERT INTO memos (id, title, body, memo_type, content_hash, created_at, updated_at)
			SELECT printf('mem_wf%04d', i), 'Workflow ' || i, 'body', 'workflow', 'h', ?, ? FROM c`,
			[]any{h.Workflows + 2, start.Format(time.RFC3339), start.Format(time.RFC3339)}},
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
			INSERT INTO workflows (memo_id, command, status, errors, updated_at)
			SELECT printf('mem_wf%04d', i), CASE WHEN i < ? THEN '/wf' || i ELSE NULL END,
				CASE WHEN i < ? THEN 'live' ELSE 'draft' END,
				CASE WHEN i < ? THEN '[]' ELSE '[{"line":3,"message":"missing Command"}]' END, ? FROM c`,
			[]any{h.Workflows + 2, h.Workflows, h.Workflows, h.Workflows, start.Format(time.RFC3339)}},
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
			INSERT INTO sessions (id, title, origin, platform, tags, policy, base_policy, event_count, last_active_at, created_at)
			SELECT printf('ses_seed%06d', i), 'Session ' || i, 'channel', 'slack', '[]', 'auto', 'auto', 1, ?, ? FROM c`,
			[]any{h.Sessions, start.Format(time.RFC3339), start.Format(time.RFC3339)}},
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)
			INSERT INTO workflow_queue_items (id, owner_uid, workflow_memo_id, command, dedupe_key, payload, status, run_id,
				session_id, created_at, claimed_at, settled_at)
			SELECT printf('itm_seed%08d', i), 'slack:U1', printf('mem_wf%04d', i % ?), '/wf' || (i % ?), 'k' || i, '{}',
				CASE WHEN i % 10 = 9 THEN 'failed' ELSE 'done' END, printf('run_seed%08d', i), printf('ses_seed%06d', i % ?),
				` + at("i", "0") + `, ` + at("i", "0") + `, ` + at("i", "1000000") + ` FROM c`,
			[]any{h.Runs, h.Workflows, h.Workflows, h.Sessions}},
		{`INSERT INTO workflow_runs (id, item_id, workflow_memo_id, command, session_id, owner_uid, status, error_kind, error,
				model, heartbeat_at, created_at, updated_at, finished_at)
			SELECT run_id, id, workflow_memo_id, command, session_id, owner_uid,
				CASE WHEN status = 'done' THEN 'succeeded'
					WHEN ` + kindsOf("CAST(substr(id, 9) AS INTEGER)") + ` = 'recovery_exhausted' THEN 'recovery_exhausted'
					ELSE 'failed' END,
				CASE WHEN status = 'done' THEN '' ELSE ` + kindsOf("CAST(substr(id, 9) AS INTEGER)") + ` END,
				CASE WHEN status = 'done' THEN '' ELSE 'seeded failure of ' || id END,
				CASE CAST(substr(id, 9) AS INTEGER) % 3 WHEN 0 THEN 'template' WHEN 1 THEN 'openai:gpt-4o-mini' ELSE 'openai:llama3' END,
				settled_at, created_at, settled_at, settled_at
			FROM workflow_queue_items WHERE id >= 'itm_seed' AND id < 'itm_seee'`, nil},
		// Tokens are written as the runner writes them, by an update, so the
		// usage trigger keeps usage_hourly.
		{`UPDATE workflow_runs SET tokens_in = 50 + CAST(substr(id, 9) AS INTEGER) % 500,
			tokens_out = 20 + CAST(substr(id, 9) AS INTEGER) % 300 WHERE id >= 'run_seed' AND id < 'run_seee'`, nil},
		{`INSERT INTO holds (id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status,
				decided_by, decided_via, decided_at, created_at)
			SELECT 'hld_' || substr(id, 5), id, item_id, session_id, owner_uid, command, 'Workflow', 'Review',
				CASE WHEN CAST(substr(id, 9) AS INTEGER) % 200 = 0 THEN 'rejected' ELSE 'approved' END,
				CASE WHEN CAST(substr(id, 9) AS INTEGER) % 200 = 0 THEN 'engine' ELSE 'ada' END,
				CASE WHEN CAST(substr(id, 9) AS INTEGER) % 200 = 0 THEN 'timeout' ELSE 'slack' END,
				finished_at, created_at
			FROM workflow_runs WHERE id >= 'run_seed' AND id < 'run_seee' AND CAST(substr(id, 9) AS INTEGER) % 20 = 0`, nil},
		{`INSERT INTO hold_decisions (hold_id, run_id, decision, decided_by, via, outcome, reason, created_at)
			SELECT id, run_id, 'approve', 'eve', 'slack', 'refused', 'eve is not a steward', created_at FROM holds
			WHERE id >= 'hld_seed' AND id < 'hld_seee'
			UNION ALL
			SELECT id, run_id, 'approve', decided_by, decided_via, 'accepted', '', decided_at FROM holds
			WHERE id >= 'hld_seed' AND id < 'hld_seee'`, nil},
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? / 10 - 1)
			INSERT INTO slack_inbox (key, kind, body, received_at, processed_at, error)
			SELECT 'Ev' || i, 'event', '{}', ` + at("i * 10", "0") + `, ` + at("i * 10", "0") + `,
				CASE WHEN i % 20 = 0 THEN 'malformed delivery: seeded' ELSE '' END FROM c`, []any{h.Runs}},
		{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? / 10 - 1)
			INSERT INTO session_events (session_id, ts, type, actor, payload)
			SELECT printf('ses_seed%06d', i % ?), ` + at("i * 10", "i") + `, 'assistant_message', 'holdfast',
				CASE WHEN i % 10 = 0 THEN '{"text":"Sorry, I could not answer: seeded","error":true}' ELSE '{"text":"fine"}' END FROM c`,
			[]any{h.Runs, h.Sessions}},
	}
	for _, s := range stmts {
		if _, err := db.Exec(s.q, s.args...); err != nil {
			tb.Fatalf("seed: %v\n%s", err, s.q)
		}
	}
}

// kindsOf is the SQL for the error kind of the run with index expr: every
// tenth run fails, cycling through RunKinds.
func kindsOf(expr string) string {
	out := "CASE (" + expr + " / 10) % " + fmt.Sprint(len(RunKinds))
	for k, name := range RunKinds {
		out += fmt.Sprintf(" WHEN %d THEN '%s'", k, name)
	}
	return out + " END"
}
