package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-bot/holdfast/store"
)

// usageColumns maps a usage grouping to the runs column it groups by.
var usageColumns = map[string]string{
	store.UsageByWorkflow: "command",
	store.UsageBySession:  "session_id",
	store.UsageByModel:    "model",
}

// UsageList sums run usage per key since p.Since, from the runs of the
// window through runs_usage (an index-only scan of the runs that used
// tokens).
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
	out, err := queryAll(ctx, db.pool, func(row scanner) (*store.Usage, error) {
		u := &store.Usage{}
		return u, row.Scan(&u.Key, &u.Runs, &u.TokensIn, &u.TokensOut)
	}, `SELECT `+col+`, COUNT(*), SUM(tokens_in)::bigint, SUM(tokens_out)::bigint FROM workflow_runs
		WHERE tokens_in + tokens_out > 0 AND created_at >= $1
		GROUP BY `+col+` ORDER BY SUM(tokens_in) + SUM(tokens_out) DESC, `+col+` LIMIT $2`, utc(p.Since), limit)
	if err != nil {
		return nil, fmt.Errorf("usage list: %w", err)
	}
	return out, nil
}

// Edge queries: each reads one partial index of migration 002, and only the
// window of it.
const (
	edgeRunCounts = `SELECT error_kind, COUNT(*) FROM workflow_runs
		WHERE status IN ('failed', 'recovery_exhausted') AND finished_at >= $1 GROUP BY error_kind`
	edgeRunLatest = `SELECT id, session_id, command, owner_uid, error, finished_at FROM workflow_runs
		WHERE status IN ('failed', 'recovery_exhausted') AND error_kind = $1 AND finished_at >= $2
		ORDER BY finished_at DESC LIMIT $3`
	edgeHoldCount  = `SELECT COUNT(*) FROM holds WHERE decided_via = 'timeout' AND decided_at >= $1`
	edgeHoldLatest = `SELECT id, run_id, session_id, command, gate_label, status, decided_at FROM holds
		WHERE decided_via = 'timeout' AND decided_at >= $1 ORDER BY decided_at DESC LIMIT $2`
	edgeRefusedCount  = `SELECT COUNT(*) FROM hold_decisions WHERE outcome = 'refused' AND created_at >= $1`
	edgeRefusedLatest = `SELECT d.hold_id, d.run_id, COALESCE(h.session_id, ''), COALESCE(h.command, ''), d.decided_by,
			d.decision, d.reason, d.created_at
		FROM hold_decisions d LEFT JOIN holds h ON h.id = d.hold_id
		WHERE d.outcome = 'refused' AND d.created_at >= $1 ORDER BY d.created_at DESC LIMIT $2`
	edgeWorkflows = `SELECT w.memo_id, COALESCE(w.command, ''), w.errors, w.updated_at, m.title
		FROM workflows w JOIN memos m ON m.id = w.memo_id
		WHERE w.errors <> '[]' ORDER BY w.updated_at DESC`
	edgeSlackCount  = `SELECT COUNT(*) FROM slack_inbox WHERE error <> '' AND received_at >= $1`
	edgeSlackLatest = `SELECT key, kind, error, received_at FROM slack_inbox
		WHERE error <> '' AND received_at >= $1 ORDER BY received_at DESC LIMIT $2`
	turnError     = `type = 'assistant_message' AND (payload::jsonb -> 'error') = 'true'::jsonb`
	edgeTurnCount = `SELECT COUNT(*) FROM session_events WHERE ` + turnError + ` AND ts >= $1`
	// ->> 'text' of a non-string is its JSON text; COALESCE covers a missing one.
	edgeTurnLatest = `SELECT session_id, COALESCE(payload::jsonb ->> 'text', ''), ts FROM session_events
		WHERE ` + turnError + ` AND ts >= $1 ORDER BY ts DESC LIMIT $2`
)

// edgeMessageChars bounds an example's message.
const edgeMessageChars = 300

func clip(s string) string {
	if utf8.RuneCountInString(s) <= edgeMessageChars {
		return s
	}
	return string([]rune(s)[:edgeMessageChars]) + "…"
}

// EdgeList reads every kind of edge in one repeatable-read, read-only
// transaction: the counts and the examples come from one snapshot.
func (db *DB) EdgeList(ctx context.Context, p *store.EdgeListParams) ([]*store.Edge, error) {
	latest := p.Latest
	if latest <= 0 {
		latest = 5
	}
	latest = min(latest, 50)
	since := utc(p.Since)
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("edge list: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var edges []*store.Edge
	add := func(kind, source string, n int64, examples []*store.EdgeExample) {
		if n > 0 {
			edges = append(edges, &store.Edge{Kind: kind, Source: source, Count: n, Latest: examples})
		}
	}
	count := func(q string) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, q, since).Scan(&n)
		return n, err
	}

	kinds, err := queryAll(ctx, tx, func(row scanner) (kindCount, error) {
		var k kindCount
		return k, row.Scan(&k.kind, &k.n)
	}, edgeRunCounts, since)
	if err != nil {
		return nil, fmt.Errorf("edge list: runs: %w", err)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].kind < kinds[j].kind })
	for _, k := range kinds {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var e store.EdgeExample
			err := row.Scan(&e.RunID, &e.SessionID, &e.Command, &e.By, &e.Message, &e.At)
			e.Message = clip(e.Message)
			return &e, err
		}, edgeRunLatest, k.kind, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: %s runs: %w", k.kind, err)
		}
		add(k.kind, store.EdgeSourceRun, k.n, ex)
	}

	n, err := count(edgeHoldCount)
	if err != nil {
		return nil, fmt.Errorf("edge list: holds: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e            store.EdgeExample
				gate, status string
			)
			err := row.Scan(&e.HoldID, &e.RunID, &e.SessionID, &e.Command, &gate, &status, &e.At)
			e.By = "timeout"
			e.Message = clip(fmt.Sprintf("%s: nobody decided in time; %s on timeout", gate, status))
			return &e, err
		}, edgeHoldLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: holds: %w", err)
		}
		add(store.EdgeHoldTimeout, store.EdgeSourceHold, n, ex)
	}

	if n, err = count(edgeRefusedCount); err != nil {
		return nil, fmt.Errorf("edge list: refused decisions: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e                store.EdgeExample
				decision, reason string
			)
			err := row.Scan(&e.HoldID, &e.RunID, &e.SessionID, &e.Command, &e.By, &decision, &reason, &e.At)
			e.Message = clip(decision + " refused: " + reason)
			return &e, err
		}, edgeRefusedLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: refused decisions: %w", err)
		}
		add(store.EdgeDecisionRefused, store.EdgeSourceDecision, n, ex)
	}

	broken, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
		var (
			e           store.EdgeExample
			errs, title string
			compile     []store.CompileError
		)
		if err := row.Scan(&e.WorkflowMemoID, &e.Command, &errs, &e.At, &title); err != nil {
			return nil, err
		}
		_ = json.Unmarshal([]byte(errs), &compile)
		e.Message = title + " does not compile"
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

	if n, err = count(edgeSlackCount); err != nil {
		return nil, fmt.Errorf("edge list: slack: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var (
				e         store.EdgeExample
				kind, msg string
			)
			err := row.Scan(&e.Key, &kind, &msg, &e.At)
			e.Message = clip(kind + ": " + msg)
			return &e, err
		}, edgeSlackLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: slack: %w", err)
		}
		add(store.EdgeSlackUnhandled, store.EdgeSourceSlack, n, ex)
	}

	if n, err = count(edgeTurnCount); err != nil {
		return nil, fmt.Errorf("edge list: turns: %w", err)
	}
	if n > 0 {
		ex, err := queryAll(ctx, tx, func(row scanner) (*store.EdgeExample, error) {
			var e store.EdgeExample
			err := row.Scan(&e.SessionID, &e.Message, &e.At)
			e.Message = clip(e.Message)
			return &e, err
		}, edgeTurnLatest, since, latest)
		if err != nil {
			return nil, fmt.Errorf("edge list: turns: %w", err)
		}
		add(store.EdgeTurnFailed, store.EdgeSourceTurn, n, ex)
	}

	if err := tx.Commit(ctx); err != nil {
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
