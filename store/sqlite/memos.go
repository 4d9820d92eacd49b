package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
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
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
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
	tags := store.MemoTags(p.Tags)
	hash := store.HashContent(p.Body)
	_, err := tx.ExecContext(ctx, `INSERT INTO memos (`+memoColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)`,
		id, p.Title, p.Body, memoType, encodeJSON(tags), p.Notes, boolInt(p.Unlisted), hash, ts, ts)
	if err != nil {
		return nil, err
	}
	if err := indexWriteTx(ctx, tx, &memoWrite{id: id, title: p.Title, body: p.Body, memoType: memoType,
		own: p.Workflow, dependents: p.Dependents, now: ts}); err != nil {
		return nil, err
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
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
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
	before := *cur
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
		cur.Tags = store.MemoTags(*p.Tags)
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
	if err := indexWriteTx(ctx, tx, &memoWrite{id: p.ID, before: &before, title: cur.Title, body: cur.Body, memoType: cur.MemoType,
		own: p.Workflow, dependents: p.Dependents, now: now}); err != nil {
		return nil, err
	}
	return memoGet(ctx, tx, p.ID)
}

// MemoSearch lists or full-text searches memos.
func (db *DB) MemoSearch(ctx context.Context, p *store.MemoSearchParams) ([]*store.Memo, error) {
	if store.SearchFindsNothing(p.Query) {
		return []*store.Memo{}, nil // an empty list, as a search that matched nothing answers
	}
	q, args, fts := memoSearchQuery(p)
	if fts {
		release, err := db.searchSlot(ctx)
		if err != nil {
			return nil, fmt.Errorf("memo search: %w", err)
		}
		defer release()
	}
	out, err := queryAll(ctx, db.r, scanMemo, q, args...)
	if err != nil {
		return nil, fmt.Errorf("memo search: %w", err)
	}
	return out, nil
}

// memoSearchQuery builds MemoSearch's query; fts reports a full-text match.
//
//   - Text: the FTS5 match drives, ranked by bm25; the filters are checked
//     on its matches (a tag through memo_tags' primary key).
//   - Tags without text: the first tag's memo_tags_listing range drives,
//     walked newest first from UpdatedSince down to the LIMIT; further tags
//     are checked through the primary key.
//   - Neither: memos_type_updated (or memos_updated for every type), newest
//     first.
func memoSearchQuery(p *store.MemoSearchParams) (q string, args []any, fts bool) {
	limit := p.Limit
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	var (
		where []string
		tags  = store.MemoTags(p.Tags)
		match = ftsQuery(p.Query)
		since string
		order string
		cols  = prefixed("m.", memoColumns)
	)
	if !p.UpdatedSince.IsZero() {
		since = formatTime(p.UpdatedSince)
	}
	filter := func(alias string) {
		if p.MemoType != "" {
			where = append(where, alias+".memo_type = ?")
			args = append(args, p.MemoType)
		}
		if since != "" {
			where = append(where, alias+".updated_at >= ?")
			args = append(args, since)
		}
		if !p.IncludeUnlisted {
			where = append(where, alias+".unlisted = 0")
		}
	}
	switch {
	case match != "":
		// CROSS JOIN keeps the match the outer loop: with a type or a time
		// filter SQLite would otherwise walk memos and probe the index per row.
		q = `SELECT ` + cols + ` FROM memos_fts CROSS JOIN memos m ON m.rowid = memos_fts.rowid`
		where = append(where, "memos_fts MATCH ?")
		args = append(args, match)
		filter("m")
		order = `bm25(memos_fts, 5.0, 1.0)`
	case len(tags) > 0:
		// memo_tags carries the filtered columns, so the range is walked in
		// its own order and memos are read only for the rows kept.
		q = `SELECT ` + cols + ` FROM memo_tags t JOIN memos m ON m.rowid = t.memo_rowid`
		where = append(where, "t.tag = ?")
		args = append(args, tags[0])
		filter("t")
		tags = tags[1:]
		order = `t.updated_at DESC`
	default:
		q = `SELECT ` + cols + ` FROM memos m`
		filter("m")
		order = `m.updated_at DESC`
	}
	for _, tag := range tags {
		where = append(where, "EXISTS (SELECT 1 FROM memo_tags x WHERE x.memo_rowid = m.rowid AND x.tag = ?)")
		args = append(args, tag)
	}
	if match != "" {
		// Only the store.MaxRankedMatches newest matches are ranked: the
		// same query, walked newest first, finds the oldest of them (its
		// FROM and aliases shadow the outer ones).
		cond := strings.Join(where, " AND ")
		where = append(where, `memos_fts.rowid >= coalesce((SELECT memos_fts.rowid FROM memos_fts CROSS JOIN memos m ON m.rowid = memos_fts.rowid
			WHERE `+cond+` ORDER BY memos_fts.rowid DESC LIMIT 1 OFFSET `+strconv.Itoa(store.MaxRankedMatches-1)+`), 0)`)
		args = append(args, args...)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY ` + order + ` LIMIT ? OFFSET ?`, append(args, limit, max(p.Offset, 0)), match != ""
}

// ftsQuery turns any user text into a safe FTS5 query, so search text is
// never a syntax error and its cost is bounded (SPEC §7):
//
//   - only the first store.MaxSearchChars characters are read; invalid UTF-8
//     and control characters are dropped (tabs and newlines separate words);
//   - a double-quoted span is a phrase, anything else a word; every term is
//     emitted as an FTS5 string, so FTS5 operators (AND, NEAR, *, ^, column
//     filters, parentheses) are searched as plain words or ignored as
//     punctuation;
//   - a term is cut into the tokens FTS5's unicode61 tokenizer makes (runs of
//     letters, digits and private-use characters), so the count below is what
//     FTS5 will match: at most store.MaxSearchTerms tokens in all, repeated
//     terms (case-insensitively) searched once;
//   - a term of several tokens (a quoted phrase, or a word such as "e-mail"
//     that FTS5 reads as one) is matched as a phrase while the phrases hold
//     at most maxPhraseTokens tokens in all, and past that as its separate
//     words: a phrase costs a position check per token in every memo holding
//     all its tokens, a word only a document-list merge.
//
// Text with no token at all (punctuation only, or nothing) answers "", which
// lists the library instead of searching it.
func ftsQuery(s string) string {
	var (
		out            []string
		seen           = map[string]bool{}
		tokens, phrase int
	)
	// add appends one term unless it repeats one; false once the cap is
	// reached.
	add := func(toks []string) bool {
		key := strings.ToLower(strings.Join(toks, " "))
		if !seen[key] {
			seen[key] = true
			tokens += len(toks)
			// Tokens hold only letters and digits: no quote to escape.
			out = append(out, `"`+strings.Join(toks, " ")+`"`)
		}
		return tokens < store.MaxSearchTerms
	}
	for _, term := range store.SearchTerms(s) {
		toks := store.SearchTokens(term)
		if len(toks) > 1 && phrase+len(toks) <= maxPhraseTokens && tokens+len(toks) <= store.MaxSearchTerms {
			phrase += len(toks)
			if !add(toks) {
				break
			}
			continue
		}
		full := false
		for _, tok := range toks {
			if full = !add([]string{tok}); full {
				break
			}
		}
		if full {
			break
		}
	}
	return strings.Join(out, " ")
}

// maxPhraseTokens bounds the tokens searched as phrases (see ftsQuery):
// on a 10,000-memo library where a word recurs a hundred times in every
// memo, each phrase token costs about 3.5 ms.
const maxPhraseTokens = 8

func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}
