package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// workflowIndexPut writes a workflow's index row (bumping its revision) and
// the names its compile looked up.
func workflowIndexPut(ctx context.Context, tx *sql.Tx, memoID string, w *store.WorkflowIndex, now string) error {
	var command any
	if w.Command != "" {
		command = w.Command
	}
	errs := w.Errors
	if errs == nil {
		errs = []store.CompileError{}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO workflows (memo_id, command, status, summary, invoke, errors, updated_at, revision)
		VALUES (?, ?, ?, ?, ?, ?, ?, 1)
		ON CONFLICT (memo_id) DO UPDATE SET command = excluded.command, status = excluded.status,
			summary = excluded.summary, invoke = excluded.invoke, errors = excluded.errors, updated_at = excluded.updated_at,
			revision = workflows.revision + 1`,
		memoID, command, w.Status, w.Summary, w.Invoke, encodeJSON(errs), now)
	if err != nil {
		if e := interpretError(err); e != err {
			return fmt.Errorf("%w: command %s is already used by another workflow", store.ErrConflict, w.Command)
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM workflow_names WHERE workflow_memo_id = ?`, memoID); err != nil {
		return err
	}
	if len(w.Names) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(w.Names))
	for _, n := range w.Names {
		args = append(args, memoID, n.Name)
	}
	// OR IGNORE: two spellings of one name (by case) are one row.
	_, err = tx.ExecContext(ctx, `INSERT OR IGNORE INTO workflow_names (workflow_memo_id, name) VALUES `+
		strings.TrimSuffix(strings.Repeat("(?, ?), ", len(w.Names)), ", "), args...)
	return err
}

// memoWrite is what a memo write means for the workflow index: the memo as
// it was (nil for a create) and as it is, its own index if it is a
// workflow, and the workflows recompiled with it.
type memoWrite struct {
	id                    string
	before                *store.Memo
	title, body, memoType string
	own                   *store.WorkflowIndex
	dependents            []*store.WorkflowRecompile
	now                   string
}

// indexWriteTx writes a memo write's indexes and refuses (ErrStaleCompile)
// the write if any index would be stale when it commits: a workflow memo
// whose body changes without its index; a recompiled workflow that changed
// since it was read; a name an index records that no longer answers as it
// did; or a workflow naming this memo that the write does not recompile.
// Every memo write goes through it (the library's, and dispatch's), so no
// path can leave a workflow's status or errors behind the library. Called
// after the memo row is written, so the checks see the library as the write
// leaves it.
func indexWriteTx(ctx context.Context, tx *sql.Tx, w *memoWrite) error {
	if w.memoType == store.MemoTypeWorkflow && w.own == nil && (w.before == nil || w.before.Body != w.body) {
		return fmt.Errorf("%w: workflow memo %s is written without its index", store.ErrStaleCompile, w.id)
	}
	covered := map[string]bool{}
	if w.own != nil {
		if err := workflowIndexPut(ctx, tx, w.id, w.own, w.now); err != nil {
			return err
		}
		covered[w.id] = true
	}
	if err := reindexTx(ctx, tx, w.dependents, w.now); err != nil {
		return err
	}
	for _, d := range w.dependents {
		covered[d.MemoID] = true
	}
	indexes := []*store.WorkflowIndex{w.own}
	for _, d := range w.dependents {
		indexes = append(indexes, d.Index)
	}
	if err := checkNamesTx(ctx, tx, indexes); err != nil {
		return err
	}
	names := []any{w.id, w.title}
	if w.before != nil && w.before.Title != w.title {
		names = append(names, w.before.Title)
	}
	rows, err := tx.QueryContext(ctx, workflowsNamingQuery(len(names)), names...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if !covered[id] {
			return fmt.Errorf("%w: workflow memo %s names memo %s (%q) and is not recompiled with it", store.ErrStaleCompile, id, w.id, w.title)
		}
	}
	return rows.Err()
}

// reindexTx writes recompiled indexes, each only if its workflow memo and
// index row are still at the versions the compile read.
func reindexTx(ctx context.Context, tx *sql.Tx, rs []*store.WorkflowRecompile, now string) error {
	for _, r := range rs {
		var version, revision int64
		err := tx.QueryRowContext(ctx, `SELECT m.content_version, w.revision FROM workflows w JOIN memos m ON m.id = w.memo_id
			WHERE w.memo_id = ?`, r.MemoID).Scan(&version, &revision)
		if err != nil {
			return fmt.Errorf("workflow memo %s: %w", r.MemoID, interpretError(err))
		}
		if version != r.MemoVersion || revision != r.Revision {
			return fmt.Errorf("%w: workflow memo %s is at version %d, index revision %d; recompiled from %d, %d",
				store.ErrStaleCompile, r.MemoID, version, revision, r.MemoVersion, r.Revision)
		}
		if err := workflowIndexPut(ctx, tx, r.MemoID, r.Index, now); err != nil {
			return err
		}
	}
	return nil
}

// checkNamesTx checks that every name the indexes record still answers as
// it did when they were compiled.
func checkNamesTx(ctx context.Context, tx *sql.Tx, indexes []*store.WorkflowIndex) error {
	answers := map[string]bool{}
	for _, idx := range indexes {
		if idx == nil {
			continue
		}
		for _, n := range idx.Names {
			exists, ok := answers[n.Name]
			if !ok {
				if err := tx.QueryRowContext(ctx, memoNamedQuery, n.Name).Scan(&exists); err != nil {
					return err
				}
				answers[n.Name] = exists
			}
			if exists != n.Exists {
				return fmt.Errorf("%w: name %q answers %t now, %t when compiled", store.ErrStaleCompile, n.Name, exists, n.Exists)
			}
		}
	}
	return nil
}

// workflowsNamingQuery lists the workflows recording any of n names, from
// workflow_names_name (names compare as titles do, ignoring case). A
// workflow may come once per name: no DISTINCT, whose temporary b-tree
// cost more than the rest of a memo write's checks together.
func workflowsNamingQuery(n int) string {
	return `SELECT workflow_memo_id FROM workflow_names WHERE name IN (` + placeholders(n) + `)`
}

// memoNamedQuery answers whether a memo has the id or title ?1; each arm is
// one index probe (the primary key, memos_title).
const memoNamedQuery = `SELECT EXISTS (SELECT 1 FROM memos WHERE id = ?1) OR EXISTS (SELECT 1 FROM memos WHERE title = ?1 COLLATE NOCASE)`

const memoIDsNamedQuery = `SELECT id FROM memos WHERE id = ?1 UNION SELECT id FROM memos WHERE title = ?1 COLLATE NOCASE`

// MemoIDsNamed lists the memos answering to name, by id or by title.
func (db *DB) MemoIDsNamed(ctx context.Context, name string) ([]string, error) {
	rows, err := db.r.QueryContext(ctx, memoIDsNamedQuery, name)
	if err != nil {
		return nil, fmt.Errorf("memos named %q: %w", name, err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("memos named %q: %w", name, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memos named %q: %w", name, err)
	}
	return ids, nil
}

// WorkflowSourceList reads workflows with their memos, index revisions and
// recorded names: those naming any of p.Names (through workflow_names_name),
// or all of them.
func (db *DB) WorkflowSourceList(ctx context.Context, p *store.WorkflowSourceListParams) ([]*store.WorkflowSource, error) {
	q := `SELECT ` + prefixed("m.", memoColumns) + `, COALESCE(w.command, ''), w.status, w.summary, w.invoke, w.errors, w.updated_at,
		w.revision, (SELECT json_group_array(n.name) FROM workflow_names n WHERE n.workflow_memo_id = w.memo_id)
		FROM workflows w JOIN memos m ON m.id = w.memo_id`
	var args []any
	switch {
	case p.All:
	case len(p.Names) == 0:
		return []*store.WorkflowSource{}, nil
	default:
		q += ` WHERE w.memo_id IN (` + workflowsNamingQuery(len(p.Names)) + `)`
		for _, n := range p.Names {
			args = append(args, n)
		}
	}
	out, err := queryAll(ctx, db.r, scanWorkflowSource, q+` ORDER BY w.memo_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("workflow sources: %w", err)
	}
	return out, nil
}

func scanWorkflowSource(row scanner) (*store.WorkflowSource, error) {
	var (
		m                      store.Memo
		w                      store.Workflow
		tags, created, updated string
		unlisted               int
		errs, wUpdated, names  string
		src                    = &store.WorkflowSource{Memo: &m, Workflow: &w}
	)
	if err := row.Scan(&m.ID, &m.Title, &m.Body, &m.MemoType, &tags, &m.Notes, &unlisted, &m.ContentVersion, &m.ContentHash,
		&created, &updated, &w.Command, &w.Status, &w.Summary, &w.Invoke, &errs, &wUpdated, &src.Revision, &names); err != nil {
		return nil, interpretError(err)
	}
	m.Unlisted = unlisted != 0
	m.Tags = decodeStrings(tags)
	m.CreatedAt, m.UpdatedAt = parseTime(created), parseTime(updated)
	w.MemoID, w.Title = m.ID, m.Title
	w.Errors = []store.CompileError{}
	_ = json.Unmarshal([]byte(errs), &w.Errors)
	w.UpdatedAt = parseTime(wUpdated)
	src.Names = decodeStrings(names)
	return src, nil
}

// WorkflowReindex writes recompiled indexes in one transaction.
func (db *DB) WorkflowReindex(ctx context.Context, rs []*store.WorkflowRecompile) error {
	if len(rs) == 0 {
		return nil
	}
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := reindexTx(ctx, tx, rs, formatTime(time.Now())); err != nil {
			return err
		}
		indexes := make([]*store.WorkflowIndex, len(rs))
		for i, r := range rs {
			indexes[i] = r.Index
		}
		return checkNamesTx(ctx, tx, indexes)
	})
	if err != nil {
		return fmt.Errorf("workflow reindex: %w", err)
	}
	return nil
}

const workflowSelect = `SELECT w.memo_id, m.title, COALESCE(w.command, ''), w.status, w.summary, w.invoke, w.errors, w.updated_at
	FROM workflows w JOIN memos m ON m.id = w.memo_id`

func scanWorkflow(row scanner) (*store.Workflow, error) {
	var (
		w       store.Workflow
		errs    string
		updated string
	)
	if err := row.Scan(&w.MemoID, &w.Title, &w.Command, &w.Status, &w.Summary, &w.Invoke, &errs, &updated); err != nil {
		return nil, interpretError(err)
	}
	w.Errors = []store.CompileError{}
	_ = json.Unmarshal([]byte(errs), &w.Errors)
	w.UpdatedAt = parseTime(updated)
	return &w, nil
}

// WorkflowList lists every workflow memo, by command.
func (db *DB) WorkflowList(ctx context.Context) ([]*store.Workflow, error) {
	out, err := queryAll(ctx, db.r, scanWorkflow, workflowSelect+` ORDER BY w.command IS NULL, w.command, m.title`)
	if err != nil {
		return nil, fmt.Errorf("workflow list: %w", err)
	}
	return out, nil
}

// WorkflowGetByCommand finds a workflow by its slash command.
func (db *DB) WorkflowGetByCommand(ctx context.Context, command string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.r.QueryRowContext(ctx, workflowSelect+` WHERE w.command = ?`, command))
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", command, err)
	}
	return w, nil
}

// WorkflowGetByMemoID finds a workflow by its memo.
func (db *DB) WorkflowGetByMemoID(ctx context.Context, memoID string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.r.QueryRowContext(ctx, workflowSelect+` WHERE w.memo_id = ?`, memoID))
	if err != nil {
		return nil, fmt.Errorf("workflow memo %s: %w", memoID, err)
	}
	return w, nil
}

// WorkflowStatusSet changes a workflow's status without touching its memo;
// the revision moves, so a re-index read before it is refused, not applied
// over the steward's change.
func (db *DB) WorkflowStatusSet(ctx context.Context, memoID, status string) (*store.Workflow, error) {
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE workflows SET status = ?, updated_at = ?, revision = revision + 1 WHERE memo_id = ?`,
			status, formatTime(time.Now()), memoID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workflow status %s: %w", memoID, err)
	}
	return db.WorkflowGetByMemoID(ctx, memoID)
}
