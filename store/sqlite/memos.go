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

const memoColumns = `id, title, body, memo_type, tags, notes, unlisted, content_version, content_hash, created_at, updated_at`

func scanMemo(row scanner) (*store.Memo, error) {
	var (
		m                store.Memo
		tags             string
		created, updated string
		unlisted         int
	)
	if err := row.Scan(&m.ID, &m.Title, &m.Body, &m.MemoType, &tags, &m.Notes, &unlisted,
		&m.ContentVersion, &m.ContentHash, &created, &updated); err != nil {
		return nil, interpretError(err)
	}
	m.Unlisted = unlisted != 0
	m.Tags = decodeStrings(tags)
	m.CreatedAt, m.UpdatedAt = parseTime(created), parseTime(updated)
	return &m, nil
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sqlite: marshal %T: %v", v, err)) // only called with JSON-safe types
	}
	return string(b)
}

func decodeStrings(s string) []string {
	out := []string{}
	_ = json.Unmarshal([]byte(s), &out)
	return out
}

func normTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	seen := map[string]bool{}
	for _, t := range tags {
		t = strings.TrimSpace(t)
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// MemoCreate inserts a memo (and its workflow index row) in one transaction.
func (db *DB) MemoCreate(ctx context.Context, p *store.MemoCreateParams) (*store.Memo, error) {
	id := store.NewID("mem")
	var m *store.Memo
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = memoCreateTx(ctx, tx, id, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("memo create: %w", err)
	}
	return m, nil
}

// memoCreateTx is shared with dispatch, which creates a run's memo inside the
// transaction that settles the run.
func memoCreateTx(ctx context.Context, tx *sql.Tx, id string, p *store.MemoCreateParams) (*store.Memo, error) {
	now := time.Now()
	ts := formatTime(now)
	memoType := p.MemoType
	if memoType == "" {
		memoType = "note"
	}
	tags := normTags(p.Tags)
	hash := store.HashContent(p.Body)
	_, err := tx.ExecContext(ctx, `INSERT INTO memos (`+memoColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)`,
		id, p.Title, p.Body, memoType, encodeJSON(tags), p.Notes, boolInt(p.Unlisted), hash, ts, ts)
	if err != nil {
		return nil, err
	}
	if p.Workflow != nil {
		if err := workflowIndexPut(ctx, tx, id, p.Workflow, ts); err != nil {
			return nil, err
		}
	}
	// The row is exactly what was inserted; dispatch creates a memo per run,
	// so it is built here rather than read back.
	at := parseTime(ts)
	return &store.Memo{ID: id, Title: p.Title, Body: p.Body, MemoType: memoType, Tags: tags, Notes: p.Notes,
		Unlisted: p.Unlisted, ContentVersion: 1, ContentHash: hash, CreatedAt: at, UpdatedAt: at}, nil
}

func memoGet(ctx context.Context, q queryRower, id string) (*store.Memo, error) {
	return scanMemo(q.QueryRowContext(ctx, `SELECT `+memoColumns+` FROM memos WHERE id = ?`, id))
}

// MemoGetByID reads one memo.
func (db *DB) MemoGetByID(ctx context.Context, id string) (*store.Memo, error) {
	m, err := memoGet(ctx, db.r, id)
	if err != nil {
		return nil, fmt.Errorf("memo %s: %w", id, err)
	}
	return m, nil
}

// MemoGetByTitle reads the newest memo with this title.
func (db *DB) MemoGetByTitle(ctx context.Context, title string) (*store.Memo, error) {
	m, err := scanMemo(db.r.QueryRowContext(ctx, `SELECT `+memoColumns+` FROM memos
		WHERE title = ? COLLATE NOCASE ORDER BY updated_at DESC LIMIT 1`, title))
	if err != nil {
		return nil, fmt.Errorf("memo titled %q: %w", title, err)
	}
	return m, nil
}

// MemoUpdate applies a compare-and-set update on contentVersion.
func (db *DB) MemoUpdate(ctx context.Context, p *store.MemoUpdateParams) (*store.Memo, error) {
	var m *store.Memo
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = memoUpdateTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("memo update %s: %w", p.ID, err)
	}
	return m, nil
}

// memoUpdateTx is shared with dispatch, which updates a stub inside the
// transaction that settles its run.
func memoUpdateTx(ctx context.Context, tx *sql.Tx, p *store.MemoUpdateParams) (*store.Memo, error) {
	cur, err := memoGet(ctx, tx, p.ID)
	if err != nil {
		return nil, err
	}
	if cur.ContentVersion != p.ExpectedVersion {
		return nil, fmt.Errorf("%w: memo is at version %d, expected %d", store.ErrConflict, cur.ContentVersion, p.ExpectedVersion)
	}
	if p.Title != nil {
		cur.Title = *p.Title
	}
	if p.Body != nil {
		cur.Body = *p.Body
	}
	if p.Notes != nil {
		cur.Notes = *p.Notes
	}
	if p.Tags != nil {
		cur.Tags = normTags(*p.Tags)
	}
	if p.Unlisted != nil {
		cur.Unlisted = *p.Unlisted
	}
	now := formatTime(time.Now())
	res, err := tx.ExecContext(ctx, `UPDATE memos SET title = ?, body = ?, notes = ?, tags = ?, unlisted = ?,
		content_version = content_version + 1, content_hash = ?, updated_at = ?
		WHERE id = ? AND content_version = ?`,
		cur.Title, cur.Body, cur.Notes, encodeJSON(cur.Tags), boolInt(cur.Unlisted),
		store.HashContent(cur.Body), now, p.ID, p.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, fmt.Errorf("%w: memo changed concurrently", store.ErrConflict)
	}
	if p.Workflow != nil {
		if err := workflowIndexPut(ctx, tx, p.ID, p.Workflow, now); err != nil {
			return nil, err
		}
	}
	return memoGet(ctx, tx, p.ID)
}

// MemoSearch lists or full-text searches memos.
func (db *DB) MemoSearch(ctx context.Context, p *store.MemoSearchParams) ([]*store.Memo, error) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	var (
		where []string
		args  []any
		q     string
	)
	if p.MemoType != "" {
		where = append(where, "m.memo_type = ?")
		args = append(args, p.MemoType)
	}
	if !p.IncludeUnlisted {
		where = append(where, "m.unlisted = 0")
	}
	if fts := ftsQuery(p.Query); fts != "" {
		where = append([]string{"memos_fts MATCH ?"}, where...)
		args = append([]any{fts}, args...)
		q = `SELECT ` + prefixed("m.", memoColumns) + ` FROM memos_fts JOIN memos m ON m.rowid = memos_fts.rowid
			WHERE ` + strings.Join(where, " AND ") + ` ORDER BY bm25(memos_fts, 5.0, 1.0) LIMIT ? OFFSET ?`
	} else {
		q = `SELECT ` + prefixed("m.", memoColumns) + ` FROM memos m`
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, " AND ")
		}
		q += ` ORDER BY m.updated_at DESC LIMIT ? OFFSET ?`
	}
	args = append(args, limit, max(p.Offset, 0))
	out, err := queryAll(ctx, db.r, scanMemo, q, args...)
	if err != nil {
		return nil, fmt.Errorf("memo search: %w", err)
	}
	return out, nil
}

// ftsQuery turns user text into an FTS5 query of quoted terms (all must
// match), so punctuation such as "tag:brief" or a stray quote is searched
// for literally instead of being a syntax error.
func ftsQuery(s string) string {
	var terms []string
	for _, f := range strings.Fields(s) {
		f = strings.ReplaceAll(f, `"`, `""`)
		terms = append(terms, `"`+f+`"`)
	}
	return strings.Join(terms, " ")
}

func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}
