package mrkdwn

import (
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// Slack's limits for a message built from section blocks. Exceeding any of
// them makes chat.postMessage fail outright (invalid_blocks / msg_too_long),
// so the splitter treats them as hard ceilings.
const (
	MaxSectionChars = 3000  // text of one section block
	MaxBlocks       = 50    // blocks in one message
	MaxMessageChars = 40000 // all text in one message
)

// Span sentinels. The renderer marks what the splitter must not cut (links
// and code spans) and where emphasis opens and closes, because neither can be
// told from the rendered text: Slack has no escape for `*`, `_`, `~` or
// backticks, so a literal asterisk looks just like a marker. They are Unicode
// noncharacters, which the standard reserves for such internal use; parse
// removes them from input and strip from output.
const (
	atomStart = '\uFDD0' // …atomEnd: a link or code span, cut only if it alone exceeds a section
	atomEnd   = '\uFDD1'
	markOpen  = '\uFDD2' // the next byte is an emphasis marker opening a span
	markClose = '\uFDD3' // the next byte is the marker closing it
)

const sentinels = "\uFDD0\uFDD1\uFDD2\uFDD3"

var (
	unforge  = strings.NewReplacer("\uFDD0", "\uFFFD", "\uFDD1", "\uFFFD", "\uFDD2", "\uFFFD", "\uFDD3", "\uFFFD")
	stripper = strings.NewReplacer("\uFDD0", "", "\uFDD1", "", "\uFDD2", "", "\uFDD3", "")
)

// atom marks s as one unit no split may fall inside.
func atom(s string) string { return string(atomStart) + s + string(atomEnd) }

// strip removes the span sentinels: what is left is what Slack gets.
func strip(s string) string {
	if !strings.ContainsAny(s, sentinels) {
		return s
	}
	return stripper.Replace(s)
}

// charLen counts UTF-16 code units of the text Slack will get (sentinels
// count nothing). Slack's documentation does not say how it counts
// characters; UTF-16 length is never below the rune count, so staying under
// the limit in UTF-16 is safe under either reading.
func charLen(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case r >= atomStart && r <= markClose:
		case r >= 0x10000:
			n += 2
		default:
			n++
		}
	}
	return n
}

// Blocks renders md and splits it into Slack messages: each message is at most 50 blocks,
// each block a section with a mrkdwn text object of at most 3,000 characters, and each
// message's total text at most 40,000 characters. Splits prefer paragraph boundaries, then
// line boundaries, then cuts inside a line, preferably at a space (SPEC §5): never inside a
// link, a code span, a `&amp;`-style entity or a UTF-8 rune; emphasis open at a cut is
// closed before it and reopened after; a code block split across sections is closed and
// reopened with ```. Only a link or code span longer than a whole section is cut, as plain
// text (a link shows its label and URL) or as several code spans.
//
// Sections are sent verbatim: links were already made explicit by Render, and
// verbatim stops Slack from turning stray text into mentions.
func Blocks(md []byte) [][]slack.Block {
	msgs := pack(sections(renderBlocks(md), MaxSectionChars), MaxBlocks, MaxMessageChars)
	out := make([][]slack.Block, len(msgs))
	for i, m := range msgs {
		bs := make([]slack.Block, len(m))
		for j, s := range m {
			bs[j] = slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, strip(s), false, true), nil, nil)
		}
		out[i] = bs
	}
	return out
}

// sections packs top-level blocks into section texts of at most limit chars.
// Packing several paragraphs into one section (rather than one each) keeps
// long memos to few messages.
func sections(blocks [][]line, limit int) []string {
	var out []string
	cur, curN := "", 0
	emit := func(s string) {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	for _, bl := range blocks {
		t := joinLines(bl)
		n := charLen(t)
		if cur != "" && curN+2+n <= limit {
			cur += "\n\n" + t
			curN += 2 + n
			continue
		}
		if cur != "" {
			emit(cur)
			cur, curN = "", 0
		}
		if n <= limit {
			cur, curN = t, n
			continue
		}
		pieces := splitLines(bl, limit)
		for _, p := range pieces[:len(pieces)-1] {
			emit(p)
		}
		cur = pieces[len(pieces)-1]
		curN = charLen(cur)
	}
	emit(cur)
	return out
}

// splitLines splits one oversized block at line boundaries, hard-cutting
// lines that alone exceed limit. An open code fence is closed at the end of
// a piece and reopened at the start of the next so both halves render as
// code.
func splitLines(ls []line, limit int) []string {
	var out []string
	var cur []string
	curN := 0
	real := false // cur holds more than a reopened fence
	open, openFence := false, ""
	flush := func() {
		if !real {
			return
		}
		if open {
			cur = append(cur, openFence+"```")
		}
		out = append(out, strings.Join(cur, "\n"))
		cur, curN, real = nil, 0, false
		if open {
			cur = []string{openFence + "```"}
			curN = charLen(cur[0])
		}
	}
	add := func(t string, n int) {
		if len(cur) > 0 {
			curN++
		}
		cur = append(cur, t)
		curN += n
		real = true
	}
	for _, l := range ls {
		inCode := l.inCode
		// A fence too deep in quotes/lists to repeat cheaply is not worth
		// reopening; the lines are then split as plain text.
		fenceN := charLen(l.fence) + 3
		if inCode && fenceN > limit/4 {
			inCode = false
		}
		reserve := 0
		if inCode {
			reserve = 1 + fenceN
		}
		t := l.text
		n := charLen(t)
		sep := 0
		if len(cur) > 0 {
			sep = 1
		}
		if curN+sep+n+reserve > limit {
			flush()
			sep = 0
			if len(cur) > 0 {
				sep = 1
			}
		}
		cut := false
		for curN+sep+n+reserve > limit {
			// The line alone does not fit (the piece was flushed above): cut it.
			head, tail, ok := cutLine(t, limit-curN-sep-reserve)
			if !ok {
				if d, changed := unwrapAtom(t); changed {
					t, n = d, charLen(d)
					continue
				}
				// Limit smaller than the markers and one unit: give up on
				// the limit rather than loop forever (only reachable with
				// toy limits).
				head, tail = forceCut(t)
			}
			add(head, charLen(head))
			open, openFence = inCode, l.fence
			flush()
			t, cut = tail, true
			n = charLen(t)
			sep = 0
			if len(cur) > 0 {
				sep = 1
			}
		}
		if cut && t == "" {
			continue // the cut left only spaces
		}
		add(t, n)
		open, openFence = inCode, l.fence
	}
	if real || len(out) == 0 {
		open = false
		real = true
		flush()
	}
	return out
}

// token is one unit of a rendered line for cutting: a rune, an entity or an
// atom (never cut), or an emphasis marker with its sentinel.
type token struct {
	kind tokenKind
	s    string // as rendered, sentinels included
	n    int    // chars Slack sees
}

type tokenKind uint8

const (
	tokText tokenKind = iota
	tokSpace
	tokAtom
	tokOpen
	tokClose
)

// tokenize splits a rendered line into tokens.
func tokenize(s string) []token {
	var out []token
	for i := 0; i < len(s); {
		var tk token
		tk, i = nextToken(s, i)
		out = append(out, tk)
	}
	return out
}

// tokenizeUpTo tokenizes s until the tokens hold more than max chars, and
// then on through any closing markers and spaces, so that whatever is left
// untokenized starts a new unit; it answers the byte offset reached.
func tokenizeUpTo(s string, max int) ([]token, int) {
	var out []token
	i, n := 0, 0
	for i < len(s) {
		if n > max {
			if tk, _ := nextToken(s, i); tk.kind != tokClose && tk.kind != tokSpace {
				break
			}
		}
		var tk token
		tk, i = nextToken(s, i)
		out = append(out, tk)
		n += tk.n
	}
	return out, i
}

// nextToken reads the token at s[i:]. Every '&' in rendered text starts an
// entity the renderer emitted (&amp; &lt; &gt;), so an entity is a unit; a
// sentinel with no partner (only after a toy-limit forced cut) counts as
// text.
func nextToken(s string, i int) (token, int) {
	r, sz := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == atomStart:
		end := len(s)
		if j := strings.IndexRune(s[i+sz:], atomEnd); j >= 0 {
			end = i + sz + j + len(string(atomEnd))
		}
		return token{tokAtom, s[i:end], charLen(s[i:end])}, end
	case (r == markOpen || r == markClose) && i+sz < len(s):
		k := tokOpen
		if r == markClose {
			k = tokClose
		}
		return token{k, s[i : i+sz+1], 1}, i + sz + 1
	case r == '&':
		for _, e := range []string{"&amp;", "&lt;", "&gt;"} {
			if strings.HasPrefix(s[i:], e) {
				return token{tokAtom, e, len(e)}, i + len(e)
			}
		}
		return token{tokText, "&", 1}, i + 1
	case r == ' ' || r == '\t':
		return token{tokSpace, s[i : i+sz], 1}, i + sz
	default:
		return token{tokText, s[i : i+sz], charLen(s[i : i+sz])}, i + sz
	}
}

// marker is the emphasis character of an open or close token.
func (t token) marker() string { return t.s[len(t.s)-1:] }

// cutLine cuts a line that does not fit into a head of at most max chars
// and the rest. The cut falls between tokens, preferably at a space in the
// second half; spaces at the cut are dropped. Emphasis open at the cut is
// closed at the end of the head and reopened at the start of the tail, with
// the markers touching text (Slack ignores `*a *`); a span is never left
// empty on either side. ok is false when not even the first unit fits.
func cutLine(t string, max int) (head, tail string, ok bool) {
	// Only the line's first max chars can hold the cut: a long line is
	// tokenized no further, so cutting it costs its length, not its square.
	toks, end := tokenizeUpTo(t, max)
	nt := len(toks)
	vis := make([]int, nt+1)   // chars of toks[:k]
	depth := make([]int, nt+1) // emphasis spans open at k
	for k, tk := range toks {
		vis[k+1] = vis[k] + tk.n
		depth[k+1] = depth[k]
		switch tk.kind {
		case tokOpen:
			depth[k+1]++
		case tokClose:
			depth[k+1]--
		}
	}
	// headEnd normalises a cut before toks[k]: closes right after it stay
	// with the head, spaces and opens right before it go.
	headEnd := func(k int) int {
		for k < nt && toks[k].kind == tokClose {
			k++
		}
		for k > 0 && (toks[k-1].kind == tokSpace || toks[k-1].kind == tokOpen) {
			k--
		}
		return k
	}
	best := -1
	for k := nt - 1; k > 0; k-- {
		h := headEnd(k)
		if h == 0 || vis[h]+max0(depth[h]) > max {
			continue
		}
		if best < 0 {
			best = h
		}
		if vis[h] <= max/2 {
			break
		}
		if toks[k-1].kind == tokSpace {
			best = h
			break
		}
	}
	if best < 0 {
		return "", "", false
	}
	head, tail = joinCut(toks, best, t[end:])
	return head, tail, true
}

// joinCut renders toks, followed by the untokenized more, cut before
// toks[h]: the head with the open spans closed, the tail with them reopened
// and without leading spaces ("" when nothing but spaces follows the cut).
func joinCut(toks []token, h int, more string) (head, tail string) {
	var stack []string
	var b strings.Builder
	for _, tk := range toks[:h] {
		b.WriteString(tk.s)
		switch tk.kind {
		case tokOpen:
			stack = append(stack, tk.marker())
		case tokClose:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		b.WriteString(string(markClose) + stack[i])
	}
	head = b.String()
	b.Reset()
	// Spaces at the cut go; so does a span that had only spaces left (a
	// code span may end in spaces), as the head has closed it already.
	rest := toks[h:]
	for len(rest) > 0 {
		if rest[0].kind == tokSpace {
			rest = rest[1:]
		} else if rest[0].kind == tokClose && len(stack) > 0 {
			stack, rest = stack[:len(stack)-1], rest[1:]
		} else {
			break
		}
	}
	if len(rest) == 0 && more == "" {
		return head, ""
	}
	for _, m := range stack {
		b.WriteString(string(markOpen) + m)
	}
	for _, tk := range rest {
		b.WriteString(tk.s)
	}
	b.WriteString(more)
	return head, b.String()
}

// forceCut cuts after the first token (closing and reopening emphasis as
// cutLine does), for limits too small for anything better.
func forceCut(t string) (head, tail string) {
	toks := tokenize(t)
	h := 1
	for h < len(toks) && toks[h-1].kind == tokOpen {
		h++
	}
	return joinCut(toks, min(h, len(toks)), "")
}

// unwrapAtom turns the first atom of t (one that alone exceeds a section)
// into text that may be cut: a link becomes its label and its URL as plain
// text, a code span an emphasis-like span of backticks, closed and reopened
// at each cut. It reports whether there was such an atom.
func unwrapAtom(t string) (string, bool) {
	for _, tk := range tokenize(t) {
		if tk.kind != tokAtom || !strings.HasPrefix(tk.s, string(atomStart)) {
			continue
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(tk.s, string(atomStart)), string(atomEnd))
		var plain string
		switch {
		case strings.HasPrefix(inner, "`") && strings.HasSuffix(inner, "`") && len(inner) >= 2:
			plain = string(markOpen) + "`" + inner[1:len(inner)-1] + string(markClose) + "`"
		case strings.HasPrefix(inner, "<") && strings.HasSuffix(inner, ">"):
			url, label, hasLabel := strings.Cut(inner[1:len(inner)-1], "|")
			plain = url
			if hasLabel {
				plain = label + " (" + url + ")"
			}
		default:
			plain = inner
		}
		return strings.Replace(t, tk.s, plain, 1), true
	}
	return t, false
}

func max0(i int) int { return max(i, 0) }

// pack groups sections into messages under both the block and text limits.
func pack(secs []string, maxBlocks, maxChars int) [][]string {
	var out [][]string
	var cur []string
	curN := 0
	for _, s := range secs {
		n := charLen(s)
		if len(cur) > 0 && (len(cur) >= maxBlocks || curN+n > maxChars) {
			out = append(out, cur)
			cur, curN = nil, 0
		}
		cur = append(cur, s)
		curN += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
