package sqlite

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

// runQueryText is a text filter as the store searches it: trimmed, control
// characters dropped, at most maxRunQuery runes (SPEC §7: any search text is
// valid input and its cost is bounded).
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

// trigramSearchable reports whether the trigram index can answer q: a
// phrase of at least three characters. Shorter text is matched with LIKE on
// the rows an index walk visits.
func trigramSearchable(q string) bool { return len([]rune(q)) >= 3 }

// runSearchKey is a run's runs_search key (migration 020) bound: the first
// key of the minute of t. Keys ascend newest minute first.
func runSearchKey(t time.Time) int64 {
	return (searchEpoch - t.UTC().Unix()/60) << searchMinuteShift
}

// runLikeCond matches a short text filter against the item's title and
// brief, for the row alias r (the item is looked up by primary key).
const runLikeCond = `EXISTS (SELECT 1 FROM workflow_queue_items li WHERE li.id = r.item_id AND
	(COALESCE(json_extract(li.payload, '$.title'), '') LIKE ? ESCAPE '\' OR COALESCE(json_extract(li.payload, '$.brief'), '') LIKE ? ESCAPE '\'))`

// runListQuery builds a listing that an index answers directly (everything
// but a trigram text filter, which runSearchList answers): a session's runs
// from runs_session, a workflow's from runs_command (one range per status,
// merged, when no status is given), a status from runs_status_created, and
// otherwise runs_created. Each is a walk in listing order cut at the limit.
func runListQuery(p *store.RunListParams) (string, []any) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	from := runFrom
	switch {
	case p.SessionID != "":
		// A session has a handful of runs: filter and sort them.
		if p.Status != "" {
			// Without statistics SQLite would walk every run of the status.
			from = runFromBySession
		}
		add(`r.session_id = ?`, p.SessionID)
		if p.Status != "" {
			add(`r.status = ?`, p.Status)
		}
		if p.Command != "" {
			add(`r.command = ?`, p.Command)
		}
	case p.Command != "" && p.Status == "":
		return runListByCommandQuery(p, limit)
	case p.Command != "":
		from = ` FROM workflow_runs r INDEXED BY runs_command JOIN workflow_queue_items i ON i.id = r.item_id`
		add(`r.command = ?`, p.Command)
		add(`r.status = ?`, p.Status)
	case p.Status != "":
		add(`r.status = ?`, p.Status)
	}
	if q := runQueryText(p.Query); q != "" {
		pat := "%" + likeEscape(q) + "%"
		add(runLikeCond, pat, pat)
	}
	if p.After != nil {
		add(`(r.created_at, r.id) < (?, ?)`, formatTime(p.After.CreatedAt), p.After.ID)
	}
	q := `SELECT ` + runColumns + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY r.created_at DESC, r.id DESC LIMIT ?`
	return q, append(args, limit)
}

// runListByCommandQuery lists one workflow's runs of every status: each
// status is a range of runs_command read in listing order (keys only) and
// cut at the limit, the ranges are merged, and only the page's rows are read.
func runListByCommandQuery(p *store.RunListParams, limit int) (string, []any) {
	var (
		cond string
		args []any
	)
	if q := runQueryText(p.Query); q != "" {
		pat := "%" + likeEscape(q) + "%"
		cond += ` AND ` + runLikeCond
		args = append(args, pat, pat)
	}
	if p.After != nil {
		cond += ` AND (r.created_at, r.id) < (?, ?)`
		args = append(args, formatTime(p.After.CreatedAt), p.After.ID)
	}
	const order = ` ORDER BY created_at DESC, id DESC LIMIT ?`
	arm := `SELECT * FROM (SELECT r.rowid AS k, r.created_at, r.id FROM workflow_runs r INDEXED BY runs_command
		WHERE r.command = ? AND r.status = ?` + cond + order + `)`
	arms := make([]string, len(allRunStatuses))
	var all []any
	for i, st := range allRunStatuses {
		arms[i] = arm
		all = append(append(append(all, p.Command, st), args...), limit)
	}
	return `SELECT ` + runColumns + ` FROM (` + strings.Join(arms, ` UNION ALL `) + order + `) AS page
		CROSS JOIN workflow_runs r ON r.rowid = page.k JOIN workflow_queue_items i ON i.id = r.item_id
		ORDER BY page.created_at DESC, page.id DESC`, append(all, limit)
}

// runSearchList answers a text filter of three characters or more from
// runs_search, whose keys order matches newest minute first (as searchList
// does for sessions): it walks matches that pass the other filters until
// `limit` of them, reads on to the end of that match's minute, then reads
// those runs and sorts them exactly. A page costs about limit plus one
// minute's matches however many runs match; a minute denser than
// searchStreamSlack is bounded and sorted by a second query instead.
func (db *DB) runSearchList(ctx context.Context, p *store.RunListParams, q string) ([]*store.Run, error) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	tx, err := db.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	from, args := runSearchMatches(p, q, false)
	rows, err := tx.QueryContext(ctx, `SELECT f.rowid, r.rowid`+from+` ORDER BY f.rowid`, args...)
	if err != nil {
		return nil, err
	}
	page, end, dense, err := readSearchPage(rows, limit)
	if err != nil {
		return nil, err
	}
	if dense {
		from, args := runSearchMatches(p, q, true)
		return queryAll(ctx, tx, scanRun, `SELECT `+runColumns+from+` AND f.rowid < ? ORDER BY r.created_at DESC, r.id DESC LIMIT ?`,
			append(args, end, limit)...)
	}
	if len(page) == 0 {
		return []*store.Run{}, nil
	}
	return queryAll(ctx, tx, scanRun, runSearchPageQuery, encodeJSON(page), limit)
}

// runSearchPageQuery reads a text filter's candidates by rowid, newest first.
const runSearchPageQuery = `SELECT ` + runColumns + runFrom + ` WHERE r.rowid IN (SELECT value FROM json_each(?))
	ORDER BY r.created_at DESC, r.id DESC LIMIT ?`

// runSearchMatches is the FROM and WHERE of the runs matching q and p's
// other filters, as runs_search f joined to workflow_runs r and its item i.
// A cursor skips the minutes newer than its own. withItem joins the item
// (for a query that reads whole runs).
func runSearchMatches(p *store.RunListParams, q string, withItem bool) (string, []any) {
	from := ` FROM runs_search AS f CROSS JOIN workflow_runs AS r ON r.rowid = f.rowid & ` + fmt.Sprint(int64(1)<<searchMinuteShift-1)
	if withItem {
		from += ` JOIN workflow_queue_items i ON i.id = r.item_id`
	}
	from += ` WHERE f.runs_search MATCH ?`
	args := []any{ftsPhrase(q)}
	if p.Status != "" {
		from += ` AND r.status = ?`
		args = append(args, p.Status)
	}
	if p.Command != "" {
		from += ` AND r.command = ?`
		args = append(args, p.Command)
	}
	if p.SessionID != "" {
		from += ` AND r.session_id = ?`
		args = append(args, p.SessionID)
	}
	if p.After != nil {
		from += ` AND f.rowid >= ? AND (r.created_at, r.id) < (?, ?)`
		args = append(args, runSearchKey(p.After.CreatedAt), formatTime(p.After.CreatedAt), p.After.ID)
	}
	return from, args
}

// runCountsQuery counts by status what RunCountsByStatus cannot read from
// the kept counts: a session's runs (few), or a text filter's matches, of
// which at most limit are visited.
func runCountsQuery(p *store.RunCountParams, limit int) (string, []any) {
	q := runQueryText(p.Query)
	if trigramSearchable(q) {
		from, args := runSearchMatches(&store.RunListParams{Command: p.Command, SessionID: p.SessionID}, q, false)
		return `SELECT status, COUNT(*) FROM (SELECT r.status` + from + ` ORDER BY f.rowid LIMIT ?) GROUP BY status`,
			append(args, limit)
	}
	lp := &store.RunListParams{Command: p.Command, SessionID: p.SessionID, Query: q}
	var (
		where []string
		args  []any
	)
	from := ` FROM workflow_runs r`
	switch {
	case p.SessionID != "":
		where = append(where, `r.session_id = ?`)
		args = append(args, p.SessionID)
		if p.Command != "" {
			where = append(where, `r.command = ?`)
			args = append(args, p.Command)
		}
	case p.Command != "":
		from = ` FROM workflow_runs r INDEXED BY runs_command`
		where = append(where, `r.command = ?`)
		args = append(args, p.Command)
	default:
		from = ` FROM workflow_runs r INDEXED BY runs_created`
	}
	if lp.Query != "" {
		pat := "%" + likeEscape(lp.Query) + "%"
		where = append(where, runLikeCond)
		args = append(args, pat, pat)
	}
	inner := `SELECT r.status` + from
	if len(where) > 0 {
		inner += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return `SELECT status, COUNT(*) FROM (` + inner + ` LIMIT ?) GROUP BY status`, append(args, limit)
}

// RunCountsByStatus counts runs per status: from run_counts (migration 020)
// when only a workflow or nothing is filtered, else by visiting at most Cap
// runs (a session's are few; a text filter is capped).
func (db *DB) RunCountsByStatus(ctx context.Context, p *store.RunCountParams) (*store.RunCounts, error) {
	out := &store.RunCounts{ByStatus: map[string]int64{}}
	for _, st := range allRunStatuses {
		out.ByStatus[st] = 0
	}
	var (
		q    string
		args []any
	)
	capN := p.Cap
	if capN <= 0 {
		capN = 1000
	}
	counted := p.SessionID != "" || runQueryText(p.Query) != ""
	switch {
	case counted:
		q, args = runCountsQuery(p, capN+1)
	case p.Command != "":
		q, args = `SELECT status, n FROM run_counts WHERE command = ?`, []any{p.Command}
	default:
		q = `SELECT status, SUM(n) FROM run_counts GROUP BY status`
	}
	rows, err := db.r.QueryContext(ctx, q, args...)
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

// RunHourCounts reads run_hour_counts from since's hour on.
func (db *DB) RunHourCounts(ctx context.Context, since time.Time) ([]store.RunHourCount, error) {
	rows, err := db.r.QueryContext(ctx, runHourCountsQuery, since.UTC().Format("2006-01-02T15"))
	if err != nil {
		return nil, fmt.Errorf("run hour counts: %w", err)
	}
	defer rows.Close()
	var out []store.RunHourCount
	for rows.Next() {
		var (
			c    store.RunHourCount
			hour string
		)
		if err := rows.Scan(&hour, &c.Status, &c.N); err != nil {
			return nil, fmt.Errorf("run hour counts: %w", err)
		}
		c.Hour, err = time.Parse("2006-01-02T15", hour)
		if err != nil {
			return nil, fmt.Errorf("run hour counts: hour %q: %w", hour, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

const runHourCountsQuery = `SELECT hour, status, n FROM run_hour_counts WHERE hour >= ? AND n > 0 ORDER BY hour, status`

// runsByDispatchQuery reads a memo's provenance from the partial
// runs_dispatch_memo index (the literal condition lets SQLite use it).
const runsByDispatchQuery = `SELECT ` + runColumns + ` FROM workflow_runs r INDEXED BY runs_dispatch_memo
	JOIN workflow_queue_items i ON i.id = r.item_id
	WHERE r.dispatch_memo_id = ? AND r.dispatch_memo_id <> '' ORDER BY r.created_at DESC, r.id DESC LIMIT ?`

// RunListByDispatchMemo lists the runs that dispatched to memoID.
func (db *DB) RunListByDispatchMemo(ctx context.Context, memoID string, limit int) ([]*store.Run, error) {
	if limit <= 0 {
		limit = 10
	}
	out, err := queryAll(ctx, db.r, scanRun, runsByDispatchQuery, memoID, limit)
	if err != nil {
		return nil, fmt.Errorf("runs of memo %s: %w", memoID, err)
	}
	return out, nil
}

// QueueItemListByIDs reads items by primary key in one query.
func (db *DB) QueueItemListByIDs(ctx context.Context, ids []string) ([]*store.QueueItem, error) {
	if len(ids) == 0 {
		return []*store.QueueItem{}, nil
	}
	out, err := queryAll(ctx, db.r, scanItem, `SELECT `+itemColumns+` FROM workflow_queue_items
		WHERE id IN (SELECT value FROM json_each(?))`, encodeJSON(ids))
	if err != nil {
		return nil, fmt.Errorf("queue items: %w", err)
	}
	return out, nil
}
