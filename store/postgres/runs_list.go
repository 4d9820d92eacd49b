package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/holdfast-bot/holdfast/store"
)

// allRunStatuses is every run status, the arms of a per-workflow listing.
var allRunStatuses = []string{store.RunRunning, store.RunSuspended, store.RunSucceeded, store.RunFailed,
	store.RunCancelled, store.RunRecoveryExhausted}

// runQueryText is a text filter as the store searches it (as store/sqlite):
// control characters become spaces, then it is trimmed and cut to
// maxRunQuery runes.
func runQueryText(q string) string {
	q = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, q)
	q = strings.TrimSpace(q)
	if r := []rune(q); len(r) > maxRunQuery {
		q = string(r[:maxRunQuery])
	}
	return q
}

const maxRunQuery = 200

// runSearchText is the item text a run's text filter matches, exactly the
// expression of the queue_items_search trigram index (migration 003): title
// and brief joined by a control character, which runQueryText never leaves
// in a filter, so a match never spans the two.
const runSearchText = `(COALESCE(i.payload::jsonb ->> 'title', '') || E'\x1f' || COALESCE(i.payload::jsonb ->> 'brief', ''))`

// runFilters is the WHERE of p's filters but the cursor, over runs r joined
// to their item i; arg binds a value.
func runFilters(p *store.RunListParams, q string, arg func(any) string) []string {
	var where []string
	if p.SessionID != "" {
		where = append(where, `r.session_id = `+arg(p.SessionID))
	}
	if p.Status != "" {
		where = append(where, `r.status = `+arg(p.Status))
	}
	if p.Command != "" {
		where = append(where, `r.command = `+arg(p.Command))
	}
	if q != "" {
		where = append(where, runSearchText+` ILIKE `+arg("%"+likeEscape(q)+"%"))
	}
	return where
}

// RunList lists runs newest first under p's filters, from p.After on, by
// (created_at, id). One workflow's runs of every status merge one
// runs_command range per status, each cut at the limit (PostgreSQL 15
// cannot skip through the status column); a text filter of three
// characters or more may be answered from the trigram index.
func (db *DB) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	q := runQueryText(p.Query)
	var (
		args  []any
		query string
	)
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if p.Command != "" && p.Status == "" && p.SessionID == "" {
		query = runListByCommandQuery(p, q, limit, arg)
	} else {
		where := runFilters(p, q, arg)
		if p.After != nil {
			where = append(where, `(r.created_at, r.id) < (`+arg(p.After.CreatedAt)+`, `+arg(p.After.ID)+`)`)
		}
		query = `SELECT ` + runColumns + runFrom
		if len(where) > 0 {
			query += ` WHERE ` + strings.Join(where, ` AND `)
		}
		query += ` ORDER BY r.created_at DESC, r.id DESC LIMIT ` + arg(limit)
	}
	if len([]rune(q)) >= 3 {
		release, err := db.searchSlot(ctx)
		if err != nil {
			return nil, fmt.Errorf("run list: %w", err)
		}
		defer release()
	}
	out, err := queryAll(ctx, db.pool, scanRun, query, args...)
	if err != nil {
		return nil, fmt.Errorf("run list: %w", err)
	}
	return out, nil
}

// runListByCommandQuery lists one workflow's runs of every status: each
// status is a range of runs_command read in listing order and cut at the
// limit, the ranges are merged, and only the page's rows are read whole.
func runListByCommandQuery(p *store.RunListParams, q string, limit int, arg func(any) string) string {
	command, lim := arg(p.Command), arg(limit)
	cond, join := "", ""
	if q != "" {
		join = ` JOIN workflow_queue_items i ON i.id = r.item_id`
		cond += ` AND ` + runSearchText + ` ILIKE ` + arg("%"+likeEscape(q)+"%")
	}
	if p.After != nil {
		cond += ` AND (r.created_at, r.id) < (` + arg(p.After.CreatedAt) + `, ` + arg(p.After.ID) + `)`
	}
	arms := make([]string, len(allRunStatuses))
	for n, st := range allRunStatuses {
		// Statuses are constants: literal, so each arm is one index range.
		arms[n] = `(SELECT r.id, r.created_at FROM workflow_runs r` + join + ` WHERE r.command = ` + command + ` AND r.status = '` + st + `'` + cond +
			` ORDER BY r.created_at DESC, r.id DESC LIMIT ` + lim + `)`
	}
	return `SELECT ` + runColumns + ` FROM (` + strings.Join(arms, ` UNION ALL `) +
		` ORDER BY created_at DESC, id DESC LIMIT ` + lim + `) AS page
		JOIN workflow_runs r ON r.id = page.id JOIN workflow_queue_items i ON i.id = r.item_id
		ORDER BY r.created_at DESC, r.id DESC`
}

// RunCountsByStatus counts runs per status: from the kept run_counts
// (migration 003) when only a workflow or nothing is filtered, else by
// visiting at most Cap of the newest matching runs (a session's are few; a
// text filter is capped).
func (db *DB) RunCountsByStatus(ctx context.Context, p *store.RunCountParams) (*store.RunCounts, error) {
	out := &store.RunCounts{ByStatus: map[string]int64{}}
	for _, st := range allRunStatuses {
		out.ByStatus[st] = 0
	}
	capN := p.Cap
	if capN <= 0 {
		capN = 1000
	}
	text := runQueryText(p.Query)
	counted := p.SessionID != "" || text != ""
	var (
		q    string
		args []any
	)
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	switch {
	case counted:
		where := runFilters(&store.RunListParams{Command: p.Command, SessionID: p.SessionID}, text, arg)
		q = `SELECT status, COUNT(*) FROM (SELECT r.status` + runFrom + ` WHERE ` + strings.Join(where, ` AND `) +
			` ORDER BY r.created_at DESC, r.id DESC LIMIT ` + arg(capN+1) + `) AS m GROUP BY status`
		if len([]rune(text)) >= 3 {
			release, err := db.searchSlot(ctx)
			if err != nil {
				return nil, fmt.Errorf("run counts: %w", err)
			}
			defer release()
		}
	case p.Command != "":
		q = `SELECT status, SUM(n)::bigint FROM run_counts WHERE command = ` + arg(p.Command) + ` GROUP BY status`
	default:
		q = `SELECT status, SUM(n)::bigint FROM run_counts GROUP BY status`
	}
	rows, err := db.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("run counts: %w", err)
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var (
			st string
			n  int64
		)
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("run counts: %w", err)
		}
		out.ByStatus[st] = n
		total += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run counts: %w", err)
	}
	if counted && total > int64(capN) {
		out.Capped = true
	}
	return out, nil
}

// RunHourCounts sums run_hour_counts' stripes from since's hour on.
func (db *DB) RunHourCounts(ctx context.Context, since time.Time) ([]store.RunHourCount, error) {
	out, err := queryAll(ctx, db.pool, func(row scanner) (store.RunHourCount, error) {
		var c store.RunHourCount
		return c, row.Scan(&c.Hour, &c.Status, &c.N)
	}, `SELECT hour, status, SUM(n)::bigint FROM run_hour_counts WHERE hour >= $1
		GROUP BY hour, status HAVING SUM(n) > 0 ORDER BY hour, status`, since.UTC().Truncate(time.Hour))
	if err != nil {
		return nil, fmt.Errorf("run hour counts: %w", err)
	}
	return out, nil
}

// RunListByDispatchMemo lists the runs that dispatched to memoID, newest
// first, from the partial runs_dispatch_memo index (its condition written
// literally so a generic plan still uses it).
func (db *DB) RunListByDispatchMemo(ctx context.Context, memoID string, limit int) ([]*store.Run, error) {
	if limit <= 0 {
		limit = 10
	}
	out, err := queryAll(ctx, db.pool, scanRun, `SELECT `+runColumns+runFrom+`
		WHERE r.dispatch_memo_id = $1 AND r.dispatch_memo_id <> '' ORDER BY r.created_at DESC, r.id DESC LIMIT $2`, memoID, limit)
	if err != nil {
		return nil, fmt.Errorf("runs of memo %s: %w", memoID, err)
	}
	return out, nil
}
