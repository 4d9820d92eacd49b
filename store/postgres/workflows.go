package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// workflowIndexPut writes a workflow's index row (bumping its revision) and
// the names its compile looked up.
func workflowIndexPut(ctx context.Context, tx *txn, memoID string, w *store.WorkflowIndex, now time.Time) error {
	var command any
	if w.Command != "" {
		command = w.Command
	}
	errs := w.Errors
	if errs == nil {
		errs = []store.CompileError{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO workflows (memo_id, command, status, summary, invoke, errors, updated_at, revision)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 1)
		ON CONFLICT (memo_id) DO UPDATE SET command = excluded.command, status = excluded.status,
			summary = excluded.summary, invoke = excluded.invoke, errors = excluded.errors, updated_at = excluded.updated_at,
			revision = workflows.revision + 1`,
		memoID, command, w.Status, w.Summary, w.Invoke, encodeJSON(errs), now)
	if err != nil {
		if isConflict(err) {
			return fmt.Errorf("%w: command %s is already used by another workflow", store.ErrConflict, w.Command)
		}
		return err
	}
	names := make([]string, len(w.Names))
	for i, n := range w.Names {
		names[i] = n.Name
	}
	// Two statements: a DELETE and an INSERT in one would not see each
	// other, and ON CONFLICT would take the rows being deleted for the new.
	if _, err := tx.Exec(ctx, `DELETE FROM workflow_names WHERE workflow_memo_id = $1`, memoID); err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	// ON CONFLICT DO NOTHING: two spellings of one name (by case) are one row.
	_, err = tx.Exec(ctx, `INSERT INTO workflow_names (workflow_memo_id, name) SELECT $1, n FROM unnest($2::text[]) AS n
		ON CONFLICT DO NOTHING`, memoID, names)
	return err
}

// memoWrite is what a memo write means for the workflow index (see
// store/sqlite's memoWrite).
type memoWrite struct {
	id                    string
	before                *store.Memo
	title, body, memoType string
	own                   *store.WorkflowIndex
	dependents            []*store.WorkflowRecompile
	now                   time.Time
}

// indexWriteTx writes a memo write's indexes and refuses (ErrStaleCompile)
// the write if any index would be stale when it commits, exactly as the
// SQLite store does.
func indexWriteTx(ctx context.Context, tx *txn, w *memoWrite) error {
	if w.memoType == store.MemoTypeWorkflow && w.own == nil && (w.before == nil || w.before.Body != w.body) {
		return fmt.Errorf("%w: workflow memo %s is written without its index", store.ErrStaleCompile, w.id)
	}
	names := []string{w.id, w.title}
	if w.before != nil && w.before.Title != w.title {
		names = append(names, w.before.Title)
	}
	indexes := []*store.WorkflowIndex{w.own}
	for _, d := range w.dependents {
		indexes = append(indexes, d.Index)
	}
	lockNamesTx(tx, names, indexes)
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
	if err := checkNamesTx(ctx, tx, indexes); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, workflowsNamingQuery, names)
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

// lockNamesTx takes a transaction lock on every name this write checks or
// answers to: its memo's id and titles, and the names its indexes record.
// SQLite runs one write at a time; under READ COMMITTED two writes could
// each miss the other's uncommitted row (a workflow naming a Gate memo
// that does not exist yet, and that Gate memo finding no workflow naming
// it) and leave the workflow compiled stale. With the lock the second
// waits for the first to commit and then sees it, and refuses
// (ErrStaleCompile) so the library recompiles.
//
// Only a write and an index recording the same name can go stale against
// each other, so a name the write merely answers to is locked shared and
// a name an index records exclusive: dispatches of one workflow, all
// titled alike, do not queue behind each other's commits, and any write
// naming that title still waits for them. One mode per name (exclusive if
// either) and sorted keys: no deadlock between two writes locking
// overlapping names, nor an upgrade from shared waiting on itself.
func lockNamesTx(tx *txn, answers []string, indexes []*store.WorkflowIndex) {
	var recorded []string
	for _, idx := range indexes {
		if idx == nil {
			continue
		}
		for _, n := range idx.Names {
			recorded = append(recorded, n.Name)
		}
	}
	// Sent with the next statement, which (a statement of its own, with
	// its own snapshot) runs once the locks are held.
	space := strconv.Itoa(nameLockSpace)
	tx.later(nil, `SELECT CASE WHEN x THEN pg_advisory_xact_lock(`+space+`, k) ELSE pg_advisory_xact_lock_shared(`+space+`, k) END
		FROM (SELECT hashtext(lower(n COLLATE "C")) AS k, bool_or(x) AS x
			FROM (SELECT n, false AS x FROM unnest($1::text[]) AS n UNION ALL SELECT n, true FROM unnest($2::text[]) AS n) AS names
			GROUP BY 1 ORDER BY 1) AS keys`, answers, recorded)
}

// nameLockSpace is the first key of lockNamesTx's advisory locks.
const nameLockSpace = 0x486e616d // "Hnam"

// reindexTx writes recompiled indexes, each only if its workflow memo and
// index row are still at the versions the compile read (read FOR UPDATE, so
// no concurrent write slips between the check and the write).
func reindexTx(ctx context.Context, tx *txn, rs []*store.WorkflowRecompile, now time.Time) error {
	for _, r := range rs {
		var version, revision int64
		err := tx.QueryRow(ctx, `SELECT m.content_version, w.revision FROM workflows w JOIN memos m ON m.id = w.memo_id
			WHERE w.memo_id = $1 FOR UPDATE`, r.MemoID).Scan(&version, &revision)
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
func checkNamesTx(ctx context.Context, tx *txn, indexes []*store.WorkflowIndex) error {
	answers := map[string]bool{}
	for _, idx := range indexes {
		if idx == nil {
			continue
		}
		for _, n := range idx.Names {
			exists, ok := answers[n.Name]
			if !ok {
				if err := tx.QueryRow(ctx, memoNamedQuery, n.Name).Scan(&exists); err != nil {
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

// workflowsNamingQuery lists the workflows recording any of the names $1
// (compared as titles are), from workflow_names_name.
const workflowsNamingQuery = `SELECT workflow_memo_id FROM workflow_names
	WHERE lower(name) = ANY (SELECT lower(n COLLATE "C") FROM unnest($1::text[]) AS n)`

// memoNamedQuery answers whether a memo has the id or title $1.
const memoNamedQuery = `SELECT EXISTS (SELECT 1 FROM memos WHERE id = $1) OR EXISTS (SELECT 1 FROM memos WHERE ` + sameName + `)`

// MemoIDsNamed lists the memos answering to name, by id or by title.
func (db *DB) MemoIDsNamed(ctx context.Context, name string) ([]string, error) {
	ids, err := queryAll(ctx, db.pool, func(row scanner) (string, error) {
		var id string
		return id, row.Scan(&id)
	}, `SELECT id FROM memos WHERE id = $1 UNION SELECT id FROM memos WHERE `+sameName, name)
	if err != nil {
		return nil, fmt.Errorf("memos named %q: %w", name, err)
	}
	return ids, nil
}

// WorkflowSourceList reads workflows with their memos, index revisions and
// recorded names.
func (db *DB) WorkflowSourceList(ctx context.Context, p *store.WorkflowSourceListParams) ([]*store.WorkflowSource, error) {
	q := `SELECT m.id, m.title, m.body, m.memo_type, m.tags, m.notes, m.unlisted, m.content_version, m.content_hash,
		m.created_at, m.updated_at, COALESCE(w.command, ''), w.status, w.summary, w.invoke, w.errors, w.updated_at,
		w.revision, ARRAY(SELECT n.name FROM workflow_names n WHERE n.workflow_memo_id = w.memo_id ORDER BY n.name)
		FROM workflows w JOIN memos m ON m.id = w.memo_id`
	var args []any
	switch {
	case p.All:
	case len(p.Names) == 0:
		return []*store.WorkflowSource{}, nil
	default:
		q += ` WHERE w.memo_id IN (` + workflowsNamingQuery + `)`
		args = append(args, p.Names)
	}
	out, err := queryAll(ctx, db.pool, scanWorkflowSource, q+` ORDER BY w.memo_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("workflow sources: %w", err)
	}
	return out, nil
}

func scanWorkflowSource(row scanner) (*store.WorkflowSource, error) {
	var (
		m          store.Memo
		w          store.Workflow
		tags, errs string
		src        = &store.WorkflowSource{Memo: &m, Workflow: &w}
	)
	if err := row.Scan(&m.ID, &m.Title, &m.Body, &m.MemoType, &tags, &m.Notes, &m.Unlisted, &m.ContentVersion, &m.ContentHash,
		&m.CreatedAt, &m.UpdatedAt, &w.Command, &w.Status, &w.Summary, &w.Invoke, &errs, &w.UpdatedAt, &src.Revision, &src.Names); err != nil {
		return nil, interpretError(err)
	}
	m.Tags = decodeStrings(tags)
	w.MemoID, w.Title = m.ID, m.Title
	w.Errors = []store.CompileError{}
	_ = json.Unmarshal([]byte(errs), &w.Errors)
	if src.Names == nil {
		src.Names = []string{}
	}
	return src, nil
}

// WorkflowReindex writes recompiled indexes in one transaction.
func (db *DB) WorkflowReindex(ctx context.Context, rs []*store.WorkflowRecompile) error {
	if len(rs) == 0 {
		return nil
	}
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		if err := reindexTx(ctx, tx, rs, utc(time.Now())); err != nil {
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
		w    store.Workflow
		errs string
	)
	if err := row.Scan(&w.MemoID, &w.Title, &w.Command, &w.Status, &w.Summary, &w.Invoke, &errs, &w.UpdatedAt); err != nil {
		return nil, interpretError(err)
	}
	w.Errors = []store.CompileError{}
	_ = json.Unmarshal([]byte(errs), &w.Errors)
	return &w, nil
}

// WorkflowList lists every workflow memo, by command (those without one
// last, by title).
func (db *DB) WorkflowList(ctx context.Context) ([]*store.Workflow, error) {
	out, err := queryAll(ctx, db.pool, scanWorkflow, workflowSelect+` ORDER BY w.command IS NULL, w.command, m.title`)
	if err != nil {
		return nil, fmt.Errorf("workflow list: %w", err)
	}
	return out, nil
}

// WorkflowGetByCommand finds a workflow by its slash command.
func (db *DB) WorkflowGetByCommand(ctx context.Context, command string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.pool.QueryRow(ctx, workflowSelect+` WHERE w.command = $1`, command))
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", command, err)
	}
	return w, nil
}

// WorkflowGetByMemoID finds a workflow by its memo.
func (db *DB) WorkflowGetByMemoID(ctx context.Context, memoID string) (*store.Workflow, error) {
	w, err := scanWorkflow(db.pool.QueryRow(ctx, workflowSelect+` WHERE w.memo_id = $1`, memoID))
	if err != nil {
		return nil, fmt.Errorf("workflow memo %s: %w", memoID, err)
	}
	return w, nil
}

// WorkflowStatusSet changes a workflow's status without touching its memo;
// the revision moves, so a re-index read before it is refused.
func (db *DB) WorkflowStatusSet(ctx context.Context, memoID, status string) (*store.Workflow, error) {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `UPDATE workflows SET status = $1, updated_at = $2, revision = revision + 1 WHERE memo_id = $3`,
			status, utc(time.Now()), memoID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workflow status %s: %w", memoID, err)
	}
	return db.WorkflowGetByMemoID(ctx, memoID)
}
