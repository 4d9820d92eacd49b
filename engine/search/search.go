// Package search is the one parser of the library's query grammar (SPEC
// §4.1), shared by the Search load class, the chat tool search_memos,
// GET /api/memos?q= and the console's memo search:
//
//	otters "sandy banks"   plain words are a full-text match, a quoted span a phrase
//	tag:brief              keeps memos carrying the tag (exact, case-insensitive)
//	tag:"needs review"     a quoted value may hold spaces
//	type:note              the default; type:workflow, or type:any for both
//	since:7d               keeps memos updated within the window (s, m, h, d, w, or a Go duration)
//	limit:12               at most 12 results (1–50)
//
// Filters combine (every one must hold). A query of filters only, such as
// `tag:brief since:7d`, is valid and lists newest first. A word whose
// prefix is no filter name (`title:x`, `12:30`, a URL) is plain text, and
// plain text is never refused: the store makes any text safe to search and
// bounds its cost. A filter with a bad value is refused with a sentence
// saying what to write instead (store.ErrInvalid, a 400 on the API).
package search

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast-bot/holdfast/store"
)

// Memo types a query may ask for.
const (
	TypeNote     = "note"
	TypeWorkflow = store.MemoTypeWorkflow
	// TypeAny matches memos of every type.
	TypeAny = "any"
)

// Result bounds.
const (
	// DefaultLimit is how many memos a search that names no limit takes
	// (SPEC §4.1): a Search load, search_memos, the API's and the
	// console's search; their listings without a query are not searches.
	DefaultLimit = 5
	// MaxLimit bounds limit:<n>.
	MaxLimit = 50
	// MaxSince bounds since:<duration>, which keeps the cut-off a time.
	MaxSince = 100 * 365 * 24 * time.Hour
)

// Query is a parsed query.
type Query struct {
	// Text is the plain words and quoted phrases, for the store's
	// full-text match ("" when the query has none).
	Text string
	// Tags must all be carried; compared as the store compares tags.
	Tags []string
	// Type is TypeNote, TypeWorkflow or TypeAny; TypeNote unless the query
	// says otherwise (see TypeGiven).
	Type      string
	TypeGiven bool
	// Since keeps memos updated within it (0: any age).
	Since time.Duration
	// Limit is limit:<n>, or 0 when the query gives none.
	Limit int
	// Written: the query has words or filters of its own, as opposed to
	// an empty search box (whatever type a surface sets on it after).
	Written bool
}

func refuse(format string, args ...any) error { return store.Refuse(store.ErrInvalid, format, args...) }

// Parse reads a query. Invalid UTF-8 and control characters say nothing
// and are dropped (whitespace ones separate words), as the store drops them
// from search text.
func Parse(s string) (*Query, error) {
	q := &Query{Type: TypeNote}
	var text []string
	seenTag := map[string]bool{}
	toks := tokenize(s)
	q.Written = len(toks) > 0
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		if tk.phrase {
			text = append(text, `"`+tk.text+`"`)
			continue
		}
		key, val, ok := strings.Cut(tk.text, ":")
		name := strings.ToLower(key)
		if !ok || !isFilter(name) {
			text = append(text, tk.text)
			continue
		}
		if val == "" && tk.quoteNext && i+1 < len(toks) && toks[i+1].phrase {
			i++ // key:"quoted value"
			val = toks[i].text
		}
		val = strings.TrimSpace(val)
		if err := q.set(name, val, seenTag); err != nil {
			return nil, err
		}
	}
	q.Text = strings.Join(text, " ")
	return q, nil
}

func isFilter(name string) bool {
	switch name {
	case "tag", "type", "since", "limit":
		return true
	}
	return false
}

func (q *Query) set(name, val string, seenTag map[string]bool) error {
	switch name {
	case "tag":
		if val == "" {
			return refuse("tag: needs a tag, as in tag:brief (quote one with spaces: tag:\"needs review\")")
		}
		if err := store.CheckName("tag", val); err != nil {
			return err
		}
		if k := store.FoldName(val); !seenTag[k] {
			seenTag[k] = true
			if len(q.Tags) == store.MaxTags {
				return refuse("a query may name at most %d tags", store.MaxTags)
			}
			q.Tags = append(q.Tags, val)
		}
	case "type":
		t := strings.ToLower(val)
		switch t {
		case TypeNote, TypeWorkflow, TypeAny:
		default:
			return refuse("type:%s is not a memo type; write type:note (the default), type:workflow or type:any", val)
		}
		if q.TypeGiven && q.Type != t {
			return refuse("type: is given twice (type:%s and type:%s); give one", q.Type, t)
		}
		q.Type, q.TypeGiven = t, true
	case "since":
		d, err := ParseSince(val)
		if err != nil {
			return err
		}
		if q.Since != 0 && q.Since != d {
			return refuse("since: is given twice; give one window")
		}
		q.Since = d
	case "limit":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > MaxLimit {
			return refuse("limit:%s is not a whole number from 1 to %d", val, MaxLimit)
		}
		if q.Limit != 0 && q.Limit != n {
			return refuse("limit: is given twice (limit:%d and limit:%d); give one", q.Limit, n)
		}
		q.Limit = n
	}
	return nil
}

// ParseSince reads a window: a whole number of seconds, minutes, hours,
// days or weeks (90s, 30m, 12h, 7d, 2w) or a Go duration (1h30m); it must
// be positive and at most MaxSince.
func ParseSince(v string) (time.Duration, error) {
	bad := func() error {
		return refuse("since:%s is not a window; write a duration such as since:7d, since:12h or since:2w", v)
	}
	if v == "" {
		return 0, refuse("since: needs a window, as in since:7d")
	}
	var d time.Duration
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	if u, ok := unit[v[len(v)-1]]; ok && len(v) > 1 && allDigits(v[:len(v)-1]) {
		n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
		if err != nil || n > int64(MaxSince/u) {
			return 0, refuse("since:%s is longer than %d days", v, int(MaxSince/(24*time.Hour)))
		}
		d = time.Duration(n) * u
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, bad()
		}
	}
	switch {
	case d <= 0:
		return 0, refuse("since:%s is not a positive window; write one such as since:7d", v)
	case d > MaxSince:
		return 0, refuse("since:%s is longer than %d days", v, int(MaxSince/(24*time.Hour)))
	}
	return d, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// SetType applies a type named outside the query (the API's memoType, the
// console's type select); "" leaves the query's own. A type the query
// gives too must agree.
func (q *Query) SetType(t string) error {
	if t == "" {
		return nil
	}
	t = strings.ToLower(strings.TrimSpace(t))
	switch t {
	case TypeNote, TypeWorkflow, TypeAny:
	default:
		return refuse("memo type %q is not one of note, workflow, any", t)
	}
	if q.TypeGiven && q.Type != t {
		return refuse("the query says type:%s but type %s was asked for too; give one", q.Type, t)
	}
	q.Type, q.TypeGiven = t, true
	return nil
}

// FiltersOnly reports whether the query has no text (it lists, newest
// first, instead of ranking matches).
func (q *Query) FiltersOnly() bool { return q.Text == "" }

// Params is the store search the query makes at now; defaultLimit applies
// when the query gives no limit.
func (q *Query) Params(now time.Time, defaultLimit int) *store.MemoSearchParams {
	p := &store.MemoSearchParams{Query: q.Text, Tags: q.Tags, Limit: q.Limit}
	if p.Limit == 0 {
		p.Limit = defaultLimit
	}
	if q.Type != TypeAny {
		p.MemoType = q.Type
	}
	if q.Since > 0 {
		p.UpdatedSince = now.Add(-q.Since)
	}
	return p
}

// ListParams is Params for a library listing: a query someone wrote takes
// the grammar's default limit (SPEC §4.1), an empty one lists listSize
// memos, newest first.
func (q *Query) ListParams(now time.Time, listSize int) *store.MemoSearchParams {
	if q.Written {
		return q.Params(now, DefaultLimit)
	}
	return q.Params(now, listSize)
}

// String writes the query in its canonical form: Parse(q.String()) is q.
func (q *Query) String() string {
	var parts []string
	if q.Text != "" {
		parts = append(parts, q.Text)
	}
	for _, t := range q.Tags {
		if strings.ContainsFunc(t, unicode.IsSpace) {
			parts = append(parts, `tag:"`+t+`"`)
		} else {
			parts = append(parts, "tag:"+t)
		}
	}
	if q.TypeGiven {
		parts = append(parts, "type:"+q.Type)
	}
	if q.Since > 0 {
		parts = append(parts, "since:"+q.Since.String())
	}
	if q.Limit > 0 {
		parts = append(parts, "limit:"+strconv.Itoa(q.Limit))
	}
	return strings.Join(parts, " ")
}

// token is a word or a quoted phrase; quoteNext marks a word ended by a
// quote (so `tag:"x y"` reads as one filter).
type token struct {
	text      string
	phrase    bool
	quoteNext bool
}

// tokenize splits s into words and double-quoted phrases, as the store's
// search text is split: a quote opens or closes a phrase wherever it
// stands, an unclosed phrase runs to the end, whitespace separates words
// and is one space inside a phrase, and invalid UTF-8 and other control
// characters are dropped. Empty phrases say nothing.
func tokenize(s string) []token {
	var (
		out   []token
		cur   strings.Builder
		quote bool
	)
	flush := func(quoteNext bool) {
		t := cur.String()
		cur.Reset()
		if quote {
			t = strings.TrimSpace(t)
		}
		if t != "" {
			out = append(out, token{text: t, phrase: quote, quoteNext: quoteNext && !quote})
		}
	}
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == utf8.RuneError && size == 1:
		case r == '"':
			flush(true)
			quote = !quote
		case unicode.IsSpace(r):
			if quote {
				if cur.Len() > 0 && !strings.HasSuffix(cur.String(), " ") {
					cur.WriteByte(' ')
				}
			} else {
				flush(false)
			}
		case unicode.IsControl(r):
		default:
			cur.WriteRune(r)
		}
	}
	flush(false)
	return out
}
