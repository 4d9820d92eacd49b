package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/holdfast-bot/holdfast/store"
)

// usageColumns maps a usage grouping to the runs column it groups by.
var usageColumns = map[string]string{
	store.UsageByWorkflow: "command",
	store.UsageBySession:  "session_id",
	store.UsageByModel:    "model",
}

// hourFormat is usage_hourly.hour: the first 13 characters of a stored time.
const hourFormat = "2006-01-02T15"

// usageQuery adds whole hours from usage_hourly to the runs of the partial
// hour the window starts in, read from the runs themselves through
// runs_created, so the window is exact while the rows read stay a few per
// hour per key.
const usageQuery = `SELECT key, SUM(runs), SUM(tokens_in), SUM(tokens_out) FROM (
		SELECT key, runs, tokens_in, tokens_out FROM usage_hourly WHERE dimension = ? AND hour >= ?
		UNION ALL
		SELECT %s, 1, tokens_in, tokens_out FROM workflow_runs INDEXED BY runs_created
			WHERE created_at >= ? AND created_at < ? AND tokens_in + tokens_out > 0
	) GROUP BY key ORDER BY SUM(tokens_in) + SUM(tokens_out) DESC, key LIMIT ?`

// UsageList sums run usage per key since p.Since.
func (db *DB) UsageList(ctx context.Context, p *store.UsageListParams) ([]*store.Usage, error) {
	col, ok := usageColumns[p.GroupBy]
	if !ok {
		return nil, fmt.Errorf("usage list: unknown grouping %q: %w", p.GroupBy, store.ErrNotFound)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	var hourFrom, rawFrom, rawTo string
	if !p.Since.IsZero() {
		since := p.Since.UTC()
		h := since.Truncate(time.Hour)
		if h.Equal(since) {
			hourFrom = h.Format(hourFormat)
		} else {
			next := h.Add(time.Hour)
			hourFrom, rawFrom, rawTo = next.Format(hourFormat), formatTime(since), formatTime(next)
		}
	}
	out, err := queryAll(ctx, db.r, func(row scanner) (*store.Usage, error) {
		u := &store.Usage{}
		return u, row.Scan(&u.Key, &u.Runs, &u.TokensIn, &u.TokensOut)
	}, fmt.Sprintf(usageQuery, col), p.GroupBy, hourFrom, rawFrom, rawTo, limit)
	if err != nil {
		return nil, fmt.Errorf("usage list: %w", err)
	}
	return out, nil
}

// Edge queries. Each reads one partial index of 033 (or 032) and only the
// window of it; the counts and the examples come from the same snapshot.
const (
	edgeRunCounts = `SELECT error_kind, COUNT(*) FROM workflow_runs INDEXED BY runs_failed
		WHERE status IN ('failed', 'recovery_exhausted') AND finished_at >= ? GROUP BY error_kind`
	edgeRunLatest = `SELECT id, session_id, command, owner_uid, error, finished_at FROM workflow_runs INDEXED BY runs_failed
		WHERE status IN ('failed', 'recovery_exhausted') AND error_kind = ? AND finished_at >= ?
		ORDER BY finished_at DESC LIMIT ?`
	edgeHoldCount = `SELECT COUNT(*) FROM holds INDEXED BY holds_timed_out
		WHERE decided_via = 'timeout' AND decided_at >= ?`
	edgeHoldLatest = `SELECT id, run_id, session_id, command, gate_label, status, decided_at FROM holds INDEXED BY holds_timed_out
		WHERE decided_via = 'timeout' AND decided_at >= ? ORDER BY decided_at DESC LIMIT ?`
	edgeRefusedCount = `SELECT COUNT(*) FROM hold_decisions INDEXED BY hold_decisions_refused
		WHERE outcome = 'refused' AND created_at >= ?`
	edgeRefusedLatest = `SELECT d.hold_id, d.run_id, COALESCE(h.session_id, ''), COALESCE(h.command, ''), d.decided_by,
			d.decision, d.reason, d.created_at
		FROM hold_decisions d INDEXED BY hold_decisions_refused LEFT JOIN holds h ON h.id = d.hold_id
		WHERE d.outcome = 'refused' AND d.created_at >= ? ORDER BY d.created_at DESC LIMIT ?`
	edgeWorkflows = `SELECT w.memo_id, COALESCE(w.command, ''), w.errors, w.updated_at, m.title
		FROM workflows w INDEXED BY workflows_broken JOIN memos m ON m.id = w.memo_id
		WHERE w.errors <> '[]' ORDER BY w.updated_at DESC`
	edgeSlackCount = `SELECT COUNT(*) FROM slack_inbox INDEXED BY slack_inbox_errors
		WHERE error <> '' AND received_at >= ?`
	edgeSlackLatest = `SELECT key, kind, error, received_at FROM slack_inbox INDEXED BY slack_inbox_errors
		WHERE error <> '' AND received_at >= ? ORDER BY received_at DESC LIMIT ?`
	edgeTurnCount = `SELECT COUNT(*) FROM session_events INDEXED BY session_events_turn_errors
		WHERE type = 'assistant_message' AND json_extract(payload, '$.error') = 1 AND ts >= ?`
	edgeTurnLatest = `SELECT session_id, COALESCE(json_extract(payload, '$.text'), ''), ts
		FROM session_events INDEXED BY session_events_turn_errors
		WHERE type = 'assistant_message' AND json_extract(payload, '$.error') = 1 AND ts >= ?
		ORDER BY ts DESC LIMIT ?`
)

// edgeMessageChars bounds an example's message: it names what happened,
// the linked record has the rest.
const edgeMessageChars = 300

func clip(s string) string {
	if utf8.RuneCountInString(s) <= edgeMessageChars {
		return s
	}
	return string([]rune(s)[:edgeMessageChars]) + "…"
}

// EdgeList reads every kind of edge in one read transaction.
func (db *DB) EdgeList(ctx context.Context, p *store.EdgeListParams) ([]*store.Edge, error) {
	latest := p.Latest
	if latest <= 0 {
		latest = 5
	}
	latest = min(latest, 50)
	since := formatTime(p.Since)
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("edge list: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var edges []*store.Edge
	add := func(kind, source string, n int64, examples []*store.EdgeExample) {
		if n > 0 {
			edges = append(edges, &store.Edge{Kind: kind, Source: source, Count: n, Latest: examples})
		}
	}
	count := func(q string) (int64, error) {
		var n int64
		err := tx.QueryRowContext(ctx, q, since).Scan(&n)
		return n, err
	}

	// Failed runs, by error kind.
	kinds, err := queryAll(ctx, tx, func(row scanner) (kindCount, error) {
		var k kindCount
		return k, row.Scan(&k.kind, &k.n)
	}, edgeRunCounts, since)
	if err != nil {
		return nil, fmt.Errorf("edge list: runs: %w", err)
	}
	for _, k := range kinds {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e  store.EdgeExample
				at string
			)
			err := row.Scan(&e.RunID, &e.SessionID, &e.Command, &e.By, &e.Message, &at)
			e.At, e.Message = parseTime(at), clip(e.Message)
			return &e, err
		}, edgeRunLatest, k.kind, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: %s runs: %w", k.kind, err)
		}
		add(k.kind, store.EdgeSourceRun, k.n, ex)
	}

	// Holds decided by their timeout.
	n, err := count(edgeHoldCount)
	if err != nil {
		return nil, fmt.Errorf("edge list: holds: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e                store.EdgeExample
				gate, status, at string
			)
			err := row.Scan(&e.HoldID, &e.RunID, &e.SessionID, &e.Command, &gate, &status, &at)
			e.At, e.By = parseTime(at), "timeout"
			e.Message = clip(fmt.Sprintf("%s: nobody decided in time; %s on timeout", gate, status))
			return &e, err
		}, edgeHoldLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: holds: %w", err)
		}
		add(store.EdgeHoldTimeout, store.EdgeSourceHold, n, ex)
	}

	// Refused decision attempts.
	if n, err = count(edgeRefusedCount); err != nil {
		return nil, fmt.Errorf("edge list: refused decisions: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e                    store.EdgeExample
				decision, reason, at string
			)
			err := row.Scan(&e.HoldID, &e.RunID, &e.SessionID, &e.Command, &e.By, &decision, &reason, &at)
			e.At, e.Message = parseTime(at), clip(decision+" refused: "+reason)
			return &e, err
		}, edgeRefusedLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: refused decisions: %w", err)
		}
		add(store.EdgeDecisionRefused, store.EdgeSourceDecision, n, ex)
	}

	// Workflows that do not compile, now (whenever they broke).
	broken, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
		var (
			e               store.EdgeExample
			errs, at, title string
			compile         []store.CompileError
		)
		if err := row.Scan(&e.WorkflowMemoID, &e.Command, &errs, &at, &title); err != nil {
			return nil, err
		}
		_ = json.Unmarshal([]byte(errs), &compile)
		e.At, e.Message = parseTime(at), title+" does not compile"
		if len(compile) > 0 {
			e.Message += fmt.Sprintf(" (%d errors; line %d: %s)", len(compile), compile[0].Line, compile[0].Message)
		}
		e.Message = clip(e.Message)
		return &e, nil
	}, edgeWorkflows)
	if err != nil {
		return nil, fmt.Errorf("edge list: workflows: %w", err)
	}
	add(store.EdgeWorkflowBroken, store.EdgeSourceWorkflow, int64(len(broken)), broken[:min(len(broken), latest)])

	// Slack deliveries set aside with an error.
	if n, err = count(edgeSlackCount); err != nil {
		return nil, fmt.Errorf("edge list: slack: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e             store.EdgeExample
				kind, msg, at string
			)
			err := row.Scan(&e.Key, &kind, &msg, &at)
			e.At, e.Message = parseTime(at), clip(kind+": "+msg)
			return &e, err
		}, edgeSlackLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: slack: %w", err)
		}
		add(store.EdgeSlackUnhandled, store.EdgeSourceSlack, n, ex)
	}

	// Chat turns that ended in an error.
	if n, err = count(edgeTurnCount); err != nil {
		return nil, fmt.Errorf("edge list: turns: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e  store.EdgeExample
				at string
			)
			err := row.Scan(&e.SessionID, &e.Message, &at)
			e.At, e.Message = parseTime(at), clip(e.Message)
			return &e, err
		}, edgeTurnLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: turns: %w", err)
		}
		add(store.EdgeTurnFailed, store.EdgeSourceTurn, n, ex)
	}

	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("edge list: %w", err)
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].Count != edges[j].Count {
			return edges[i].Count > edges[j].Count
		}
		return edges[i].Kind < edges[j].Kind
	})
	if edges == nil {
		edges = []*store.Edge{}
	}
	return edges, nil
}

type kindCount struct {
	kind string
	n    int64
}
