package store

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The cleaning both stores apply to search text before it reaches their
// full-text engines (SPEC §7: any text is valid, its cost is bounded), kept
// once so that SQLite and PostgreSQL answer the same query alike.

// SearchTerms cleans s (first MaxSearchChars characters, valid UTF-8,
// no control characters) and splits it into words and double-quoted
// phrases; an unclosed quote runs to the end. A term the character cap cuts
// in two is dropped (the fragment is not what was asked), unless it is the
// only term: dropping it would turn a text search into a listing of the
// whole library, so it is searched as cut.
func SearchTerms(s string) []string {
	var (
		terms []string
		cur   strings.Builder
		quote bool
		n     int
	)
	flush := func() {
		if cur.Len() > 0 {
			terms = append(terms, cur.String())
			cur.Reset()
		}
	}
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if r == utf8.RuneError && size == 1 {
			continue // invalid UTF-8 says nothing
		}
		if n == MaxSearchChars {
			if !unicode.IsSpace(r) && r != '"' && len(terms) > 0 {
				cur.Reset()
			}
			break
		}
		n++
		switch {
		case r == '"':
			flush()
			quote = !quote
		case unicode.IsSpace(r):
			if quote {
				cur.WriteRune(' ')
			} else {
				flush()
			}
		case unicode.IsControl(r):
			// NUL and other control characters say nothing: dropped.
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return terms
}

// SearchFindsNothing reports whether search text has terms someone typed
// yet no word in them to match ("*", "🦫", "--"): such a search matches no
// memo. Text with no term at all (spaces, control characters, invalid
// UTF-8, a lone quote) says nothing, and lists memos as an empty query does.
func SearchFindsNothing(s string) bool {
	terms := SearchTerms(s)
	for _, term := range terms {
		if len(SearchTokens(term)) > 0 {
			return false
		}
	}
	return len(terms) > 0
}

// CleanSearchText is the text a session filter searches for: the first
// MaxSearchChars characters of s, invalid UTF-8 and control
// characters dropped (whitespace ones become spaces), trimmed.
func CleanSearchText(s string) string {
	var (
		b strings.Builder
		n int
	)
	for len(s) > 0 && n < MaxSearchChars {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if r == utf8.RuneError && size == 1 {
			continue
		}
		n++
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case unicode.IsControl(r):
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// SearchTokens cuts a term where FTS5's unicode61 tokenizer does (and
// PostgreSQL's simple parser, near enough) (its default
// token characters are the categories L*, N* and Co; everything else
// separates), so each token stays one FTS5 token.
func SearchTokens(term string) []string {
	return strings.FieldsFunc(term, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.Is(unicode.Co, r)
	})
}
