package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const memoColumns = `id, title, body, memo_type, tags, notes, unlisted, content_version, content_hash, created_at, updated_at`

// sameName is how a name compares with a title (SQLite's NOCASE): lower()
// under "C" folds ASCII letters only, on both sides.
const sameName = `lower(title) = lower($1::text COLLATE "C")`

func scanMemo(row scanner) (*store.Memo, error) {
	var (
		m    store.Memo
		tags string
	)
	if err := row.Scan(&m.ID, &m.Title, &m.Body, &m.MemoType, &tags, &m.Notes, &m.Unlisted,
		&m.ContentVersion, &m.ContentHash, &m.CreatedAt, &m.UpdatedAt); err != nil {
		return nil, interpretError(err)
	}
	m.Tags = decodeStrings(tags)
	return &m, nil
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("postgres: marshal %T: %v", v, err)) // only called with JSON-safe types
	}
	return string(b)
}

func decodeStrings(s string) []string {
	out := []string{}
	_ = json.Unmarshal([]byte(s), &out)
	return out
}

func decodeMap(s string) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal([]byte(s), &m)
	return m
}

// MemoCreate inserts a memo (and its workflow index row) in one transaction.
func (db *DB) MemoCreate(ctx context.Context, p *store.MemoCreateParams) (*store.Memo, error) {
	id := store.NewID("mem")
	var m *store.Memo
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		m, err = memoCreateTx(ctx, tx, id, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("memo create: %w", err)
	}
	return m, nil
}

// memoCreateTx is shared with dispatch, which creates a run's memo inside
// the transaction that settles the run.
func memoCreateTx(ctx context.Context, tx *txn, id string, p *store.MemoCreateParams) (*store.Memo, error) {
	now := utc(time.Now())
	memoType := p.MemoType
	if memoType == "" {
		memoType = "note"
	}
	tags := store.MemoTags(p.Tags)
	hash := store.HashContent(p.Body)
	// Sent with the name lock and the name check (indexWriteTx).
	tx.later(nil, `INSERT INTO memos (`+memoColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $9)`,
		id, p.Title, p.Body, memoType, encodeJSON(tags), p.Notes, p.Unlisted, hash, now)
	if err := indexWriteTx(ctx, tx, &memoWrite{id: id, title: p.Title, body: p.Body, memoType: memoType,
		own: p.Workflow, dependents: p.Dependents, now: now}); err != nil {
		return nil, err
	}
	return &store.Memo{ID: id, Title: p.Title, Body: p.Body, MemoType: memoType, Tags: tags, Notes: p.Notes,
		Unlisted: p.Unlisted, ContentVersion: 1, ContentHash: hash, CreatedAt: now, UpdatedAt: now}, nil
}

func memoGet(ctx context.Context, q querier, id string, lock bool) (*store.Memo, error) {
	query := `SELECT ` + memoColumns + ` FROM memos WHERE id = $1`
	if lock {
		query += ` FOR UPDATE`
	}
	return scanMemo(q.QueryRow(ctx, query, id))
}

// MemoGetByID reads one memo.
func (db *DB) MemoGetByID(ctx context.Context, id string) (*store.Memo, error) {
	m, err := memoGet(ctx, db.pool, id, false)
	if err != nil {
		return nil, fmt.Errorf("memo %s: %w", id, err)
	}
	return m, nil
}

// MemoGetByTitle reads the newest memo with this title.
func (db *DB) MemoGetByTitle(ctx context.Context, title string) (*store.Memo, error) {
	m, err := scanMemo(db.pool.QueryRow(ctx, `SELECT `+memoColumns+` FROM memos
		WHERE `+sameName+` ORDER BY updated_at DESC LIMIT 1`, title))
	if err != nil {
		return nil, fmt.Errorf("memo titled %q: %w", title, err)
	}
	return m, nil
}

// MemoUpdate applies a compare-and-set update on contentVersion.
func (db *DB) MemoUpdate(ctx context.Context, p *store.MemoUpdateParams) (*store.Memo, error) {
	var m *store.Memo
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var err error
		m, err = memoUpdateTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("memo update %s: %w", p.ID, err)
	}
	return m, nil
}

// memoUpdateTx is shared with dispatch. The row is read FOR UPDATE, so the
// version check and the write see the same memo.
func memoUpdateTx(ctx context.Context, tx *txn, p *store.MemoUpdateParams) (*store.Memo, error) {
	cur, err := memoGet(ctx, tx, p.ID, true)
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
	now := utc(time.Now())
	cur.ContentVersion++
	cur.ContentHash = store.HashContent(cur.Body)
	cur.UpdatedAt = now
	tag, err := tx.Exec(ctx, `UPDATE memos SET title = $1, body = $2, notes = $3, tags = $4, unlisted = $5,
		content_version = content_version + 1, content_hash = $6, updated_at = $7
		WHERE id = $8 AND content_version = $9`,
		cur.Title, cur.Body, cur.Notes, encodeJSON(cur.Tags), cur.Unlisted, cur.ContentHash, now, p.ID, p.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() != 1 {
		return nil, fmt.Errorf("%w: memo changed concurrently", store.ErrConflict)
	}
	if err := indexWriteTx(ctx, tx, &memoWrite{id: p.ID, before: &before, title: cur.Title, body: cur.Body, memoType: cur.MemoType,
		own: p.Workflow, dependents: p.Dependents, now: now}); err != nil {
		return nil, err
	}
	return cur, nil
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
	out, err := queryAll(ctx, db.pool, scanMemo, q, args...)
	if err != nil {
		return nil, fmt.Errorf("memo search: %w", err)
	}
	return out, nil
}

// sameTag is how a tag filter compares with memo_tags.tag, which holds the
// tag under lower() in "C" (ASCII letters folded, as SQLite's NOCASE).
func sameTag(col, placeholder string) string {
	return col + ` = lower(` + placeholder + `::text COLLATE "C")`
}

// memoSearchQuery builds MemoSearch's query, as the SQLite store's;
// fts reports a full-text match.
//
//   - Text: the tsvector match (memos_search) drives, ranked by ts_rank;
//     the filters are checked on its matches (a tag through memo_tags'
//     primary key).
//   - Tags without text: the first tag's memo_tags_listing range drives,
//     newest first from UpdatedSince down to the LIMIT; further tags are
//     checked through the primary key.
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
		terms = tsTerms(p.Query)
		tsq   = strings.Join(terms, " & ")
		order string
		cols  = prefixed("m.", memoColumns)
	)
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	filter := func(alias string) {
		if p.MemoType != "" {
			where = append(where, alias+".memo_type = "+arg(p.MemoType))
		}
		if !p.UpdatedSince.IsZero() {
			where = append(where, alias+".updated_at >= "+arg(utc(p.UpdatedSince)))
		}
		if !p.IncludeUnlisted {
			where = append(where, "NOT "+alias+".unlisted")
		}
	}
	switch {
	case tsq != "":
		q = `SELECT ` + cols + ` FROM memos m`
		where = append(where, "m.search @@ to_tsquery('simple', "+arg(tsq)+")")
		filter("m")
		// Title matches weigh five times body matches, as SQLite's bm25(5, 1).
		rank := strings.Join(terms[:min(len(terms), maxRankTerms)], " | ")
		order = `ts_rank('{0.1, 0.2, 0.2, 1.0}', m.search, to_tsquery('simple', ` + arg(rank) + `)) DESC, m.updated_at DESC, m.id DESC`
	case len(tags) > 0:
		// memo_tags carries the filtered columns, so the range is walked in
		// its own order and memos are read only for the rows kept.
		q = `SELECT ` + cols + ` FROM memo_tags t JOIN memos m ON m.id = t.memo_id`
		where = append(where, sameTag("t.tag", arg(tags[0])))
		filter("t")
		tags = tags[1:]
		order = `t.updated_at DESC, t.memo_id DESC`
	default:
		q = `SELECT ` + cols + ` FROM memos m`
		filter("m")
		order = `m.updated_at DESC, m.id DESC`
	}
	for _, tag := range tags {
		where = append(where, "EXISTS (SELECT 1 FROM memo_tags x WHERE x.memo_id = m.id AND "+sameTag("x.tag", arg(tag))+")")
	}
	if tsq != "" {
		// Only the store.MaxRankedMatches newest matches are ranked:
		// matched once, then the newest read back by primary key to rank.
		q = `WITH matched AS MATERIALIZED (SELECT m.id, m.created_at FROM memos m WHERE ` + strings.Join(where, " AND ") + `)
			SELECT ` + cols + ` FROM memos m`
		where = []string{`m.id IN (SELECT id FROM matched ORDER BY created_at DESC LIMIT ` + strconv.Itoa(store.MaxRankedMatches) + `)`}
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY ` + order + ` LIMIT ` + arg(limit) + ` OFFSET ` + arg(max(p.Offset, 0))
	return q, args, tsq != ""
}

// maxRankTerms bounds the terms a match is ranked by, OR-ed: ts_rank is
// evaluated on every match and costs per term, and on an AND-ed query it
// weighs every pair of terms' positions (32 terms matching all of a
// 10,000-memo library: 230 ms of ranking, against 83 ms for these 8 OR-ed,
// the search 386 → 84 ms in all). OR-ed terms are ranked by a weighted sum
// of their occurrences, as SQLite's bm25 ranks; matching still needs every
// term.
const maxRankTerms = 8

// tsTerms turns any user text into safe to_tsquery terms under the rules
// the SQLite store applies to FTS5 (its ftsQuery): only the first
// store.MaxSearchChars characters are read, invalid UTF-8 and control
// characters dropped; a double-quoted span is a phrase, anything else a
// word; each term is cut into runs of letters, digits and private-use
// characters, every token a quoted lexeme, so tsquery operators (& | ! <->
// :* parentheses) are punctuation, never syntax; at most
// store.MaxSearchTerms tokens in all, repeats searched once; a term of
// several tokens is a phrase (<->) while the phrases hold at most
// maxPhraseTokens tokens in all, and past that its separate words. Each
// term is parenthesised, so they join with & (all must match) or | as
// they are. Text with no token answers none, which lists the library
// instead of searching it.
func tsTerms(s string) []string {
	var (
		out            []string
		seen           = map[string]bool{}
		tokens, phrase int
	)
	add := func(toks []string) bool {
		key := strings.ToLower(strings.Join(toks, " "))
		if !seen[key] {
			seen[key] = true
			tokens += len(toks)
			// Tokens hold only letters and digits: no quote to escape.
			q := make([]string, len(toks))
			for i, t := range toks {
				q[i] = "'" + t + "'"
			}
			out = append(out, "("+strings.Join(q, " <-> ")+")")
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
	return out
}

// maxPhraseTokens bounds the tokens searched as phrases (see tsTerms), as on
// SQLite: a phrase costs a position check per token in every memo holding
// all its tokens.
const maxPhraseTokens = 8

// prefixed qualifies each of a comma-separated column list with prefix.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}
