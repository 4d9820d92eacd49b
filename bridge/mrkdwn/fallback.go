package mrkdwn

import (
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
)

// Fallback returns plain text for the message's top-level `text` field (notifications), at most n runes.
//
// Notifications show a single run of text, so markup is dropped and all
// whitespace collapses to single spaces. The result is still entity-escaped
// because Slack parses the `text` field with the same rules as mrkdwn.
func Fallback(md []byte, n int) string {
	if n <= 0 {
		return ""
	}
	r, doc := parse(md)
	var b strings.Builder
	r.plainBlocks(&b, doc)
	s := esc(strings.Join(strings.Fields(b.String()), " "))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	// Cut at n-1 runes to leave room for the ellipsis.
	i, k := 0, 0
	for j := range s {
		if k == n-1 {
			i = j
			break
		}
		k++
	}
	if a := strings.LastIndexByte(s[max0(i-4):i], '&'); a >= 0 {
		a += max0(i - 4)
		if !strings.Contains(s[a:i], ";") {
			i = a
		}
	}
	// Prefer ending on a word boundary when one is reasonably close.
	if sp := strings.LastIndexByte(s[:i], ' '); sp > i/2 {
		i = sp
	}
	return strings.TrimRight(s[:i], " ") + "…"
}

func (r *renderer) plainBlocks(b *strings.Builder, n ast.Node) {
	switch n.(type) {
	case *ast.CodeBlock, *ast.FencedCodeBlock, *ast.HTMLBlock:
		b.WriteString(strings.Join(r.rawLines(n, true), " "))
		b.WriteByte(' ')
		return
	}
	if c := n.FirstChild(); c != nil && c.Type() == ast.TypeInline {
		b.WriteString(r.plain(n))
		b.WriteByte(' ')
		return
	}
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.plainBlocks(b, c)
	}
}

// labelBar stands for | in a link's label (<url|label>), where Slack has no
// escape for it and a | would end the label: ∣ reads the same.
const labelBar = "∣"

// Label is Fallback for the label of a link (<url|label>).
func Label(md []byte, n int) string { return strings.ReplaceAll(Fallback(md, n), "|", labelBar) }
