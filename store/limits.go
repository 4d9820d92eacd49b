package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Input limits (SPEC §7), the same on every surface. They live here, in the
// one package every layer imports, so the API, the console, the Slack bridge,
// the CLI, the engine and the store implementations read the same numbers.
const (
	// MaxNameChars bounds titles, tags, dedupe keys and usernames, in
	// characters (runes).
	MaxNameChars = 500
	// MaxTags bounds the tags of one memo or session.
	MaxTags = 50
	// MaxCommentChars bounds a hold decision's comment or reason, in
	// characters: a note for the requester and the audit, not a document.
	MaxCommentChars = 2000
	// MaxMemoBodyBytes bounds a memo body.
	MaxMemoBodyBytes = 1 << 20
	// MaxRequestBytes bounds an API request body and a console form; larger
	// ones are answered 413.
	MaxRequestBytes = 2 << 20
	// MaxSearchTerms and MaxSearchChars bound the cost of a search: only the
	// first MaxSearchChars characters of a search text are read and only its
	// first MaxSearchTerms distinct terms searched. Search text is never
	// refused: whatever lies past the caps is ignored.
	MaxSearchTerms = 32
	MaxSearchChars = 1000
	// MaxRankedMatches bounds the matches a text search ranks by relevance:
	// ranking costs the stores some 10-15 µs a match (32 terms, or one,
	// matching all of a 10,000-memo library: 100-150 ms), so a search
	// matching more ranks its MaxRankedMatches newest matches, by when each
	// memo was created, and leaves the older ones out. Such a search is too
	// broad for its 50 best to mean much; the newest are the likelier to be
	// wanted.
	MaxRankedMatches = 1000
	// MaxValueDepth bounds how deeply a payload or a context nests. The
	// stores read these values with their JSON functions, which stop
	// somewhere (SQLite's at 1,000 levels): a value past that would fail
	// every statement that reads it, the runner's claims among them.
	MaxValueDepth = 64
)

// ErrTooLarge marks content past its size limit (a memo body over
// MaxMemoBodyBytes). Such errors wrap ErrInvalid too; surfaces that tell
// the two apart answer 413, as for an oversize request.
var ErrTooLarge = errors.New("too large")

// errTooLargeInvalid is the kind of a too-large refusal: both sentinels.
var errTooLargeInvalid = fmt.Errorf("%w: %w", ErrInvalid, ErrTooLarge)

// CheckText is the one text check: s must be valid UTF-8 without NUL bytes
// and, when maxChars > 0, at most maxChars characters long. field names the
// input in the error.
func CheckText(field, s string, maxChars int) error {
	if !utf8.ValidString(s) {
		return Refuse(ErrInvalid, "%s is not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return Refuse(ErrInvalid, "%s contains a NUL byte", field)
	}
	if maxChars > 0 && len(s) > maxChars && utf8.RuneCountInString(s) > maxChars {
		return Refuse(ErrInvalid, "%s is longer than %d characters", field, maxChars)
	}
	return nil
}

// CheckFields checks every name and value of a form or query string
// (url.Values) as text; what says which ("query parameter"). A query
// decoding to invalid UTF-8 is refused, not searched for as nothing.
func CheckFields(what string, vs map[string][]string) error {
	for k, vals := range vs {
		if err := CheckText(what+" name", k, 0); err != nil {
			return err
		}
		for _, v := range vals {
			if err := CheckText(what+" "+strconv.Quote(k), v, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckName checks a title, tag, dedupe key or username.
func CheckName(field, s string) error { return CheckText(field, s, MaxNameChars) }

// CheckUsername checks a username: a name of at least one character, with
// no whitespace (a space would make names that look alike).
func CheckUsername(u string) error {
	if u == "" {
		return Refuse(ErrInvalid, "username is required")
	}
	if strings.ContainsFunc(u, unicode.IsSpace) {
		return Refuse(ErrInvalid, "username may not contain spaces")
	}
	return CheckName("username", u)
}

// CheckSlackUserID checks the Slack user a console user is linked to: ""
// (none) or an id as Slack writes them (U…, or W… on Enterprise Grid). A
// typo would otherwise link nobody, silently: the user would hold no
// steward rights in Slack.
func CheckSlackUserID(id string) error {
	if id == "" {
		return nil
	}
	ok := len(id) >= 2 && len(id) <= 32 && (id[0] == 'U' || id[0] == 'W')
	for _, c := range id {
		ok = ok && ('A' <= c && c <= 'Z' || '0' <= c && c <= '9')
	}
	if !ok {
		return Refuse(ErrInvalid, "%q is not a Slack user id (as Slack writes them: U0123ABCD, or W… on Enterprise Grid)", id)
	}
	return nil
}

// CheckMemoBody checks a memo body: UTF-8 without NUL, at most
// MaxMemoBodyBytes bytes (past that the error wraps ErrTooLarge too).
func CheckMemoBody(field, s string) error {
	if len(s) > MaxMemoBodyBytes {
		return &Refusal{Kind: errTooLargeInvalid, Reason: fmt.Sprintf("%s is larger than %d bytes", field, MaxMemoBodyBytes)}
	}
	return CheckText(field, s, 0)
}

// CheckTags checks a list of tags: at most MaxTags, each a name, none
// blank (a blank one names nothing, and would be dropped unseen).
func CheckTags(field string, tags []string) error {
	if len(tags) > MaxTags {
		return Refuse(ErrInvalid, "%s has %d tags, more than %d", field, len(tags), MaxTags)
	}
	for _, t := range tags {
		if strings.TrimSpace(t) == "" {
			return Refuse(ErrInvalid, "%s holds a blank tag; leave it out", field)
		}
		if err := CheckName(field, t); err != nil {
			return err
		}
	}
	return nil
}

// CheckValue checks every string inside a JSON-like value (a payload or a
// context: maps, slices, strings, numbers, booleans), keys included, with
// CheckText and no length limit, and that it nests at most MaxValueDepth
// deep.
func CheckValue(field string, v any) error { return checkValue(field, field, v, 0) }

func checkValue(root, field string, v any, depth int) error {
	switch v.(type) {
	case map[string]any, []any, []string:
		if depth++; depth > MaxValueDepth {
			return Refuse(ErrInvalid, "%s nests more than %d levels deep", root, MaxValueDepth)
		}
	}
	switch v := v.(type) {
	case string:
		return CheckText(field, v, 0)
	case map[string]any:
		for k, e := range v {
			if err := CheckText(field+" key", k, 0); err != nil {
				return err
			}
			if err := checkValue(root, field+"."+k, e, depth); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkValue(root, field, e, depth); err != nil {
				return err
			}
		}
	case []string:
		for _, e := range v {
			if err := CheckText(field, e, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// FoldName lowers ASCII letters only: titles and memo tags compare as
// SQLite's NOCASE does, and every store compares them so.
func FoldName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Distinct is ss trimmed, blanks dropped and each kept once (a session's
// tags, a filter's list of origins or types).
func Distinct(ss []string) []string {
	out := make([]string, 0, len(ss))
	seen := map[string]bool{}
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// MemoTags is a memo's tags as stored: trimmed, blanks dropped, and each
// kept once as first written, since tags match in any case (FoldName).
func MemoTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	seen := map[string]bool{}
	for _, t := range tags {
		t = strings.TrimSpace(t)
		if k := FoldName(t); t != "" && !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	return out
}
