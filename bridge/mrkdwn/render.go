// Package mrkdwn turns memo Markdown into Slack mrkdwn.
//
// Slack's mrkdwn is not Markdown: it has single-character emphasis markers,
// its own link syntax, no headings, lists or tables, and it interprets
// `&`, `<` and `>` as entity and link delimiters. Converting text with regular
// expressions breaks on nesting and code, so the document is parsed with
// goldmark and its AST is walked; every leaf is escaped before markup is
// added, which keeps user text from ever becoming Slack control syntax.
//
// Known limits, accepted to keep the output predictable:
//   - Slack only honours `*`, `_` and `~` at word boundaries, so emphasis in
//     the middle of a word (`foo**bar**baz`) shows its markers literally.
//   - Slack has no escape for `*`, `_`, `~` and backticks, so such characters
//     in plain text (e.g. Markdown `\*x\*`) may still be read as formatting,
//     and a backtick inside a code span or a ``` line inside a code block
//     ends it early.
//   - Link labels are flattened to plain text: Slack does not format inside
//     `<url|label>`.
package mrkdwn

import (
	"bufio"
	"bytes"
	stdhtml "html"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"

	"github.com/holdfast-bot/holdfast/engine/workflow/mdlimit"
)

// Linkify turns bare URLs into AutoLink nodes, so sections can be sent with
// verbatim=true (no Slack auto-parsing of stray @channel-like text) and still
// have clickable links. The parser is goldmark's with its superlinear
// constructs metered (package mdlimit), as the compiler's and the console's
// are: a memo mirrored into a thread costs linear time whatever its shape.
var parser = goldmark.New(goldmark.WithParser(mdlimit.NewParser()), goldmark.WithExtensions(
	extension.Strikethrough,
	extension.Table,
	extension.Linkify,
)).Parser()

// thematicBreak stands in for <hr>: Slack has no rule, and a line of box
// drawing characters cannot be mistaken for markup.
const thematicBreak = "──────────"

// listIndent indents continuation lines and nested lists of a list item.
// A fixed width (rather than the marker's width) keeps nesting readable in
// Slack's proportional font.
const listIndent = "    "

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// esc applies Slack's escaping; it must run on every piece of user text
// before any mrkdwn syntax is wrapped around it.
func esc(s string) string { return escaper.Replace(s) }

// line is one output line. Lines carry the code-fence state so the splitter
// can close and reopen a fence when a code block straddles two sections.
type line struct {
	text   string
	inCode bool   // a ``` fence is open after this line
	fence  string // prefix a closing/reopening ``` needs to stay in the same container
}

type renderer struct {
	src []byte
	buf bytes.Buffer
	w   *bufio.Writer
}

func parse(md []byte) (*renderer, ast.Node) {
	if !utf8.Valid(md) {
		// Slack rejects invalid UTF-8; replacing up front keeps every later
		// cut on a real rune boundary.
		md = bytes.ToValidUTF8(md, []byte("\uFFFD"))
	}
	if bytes.ContainsAny(md, sentinels) {
		// The span sentinels are ours alone (see split.go): input that
		// carries them could forge a span.
		md = []byte(unforge.Replace(string(md)))
	}
	r := &renderer{src: md}
	r.w = bufio.NewWriter(&r.buf)
	return r, parser.Parse(text.NewReader(md))
}

// renderBlocks renders each top-level block separately: top-level block
// boundaries are the preferred split points.
func renderBlocks(md []byte) [][]line {
	r, doc := parse(md)
	var out [][]line
	for c := doc.FirstChild(); c != nil; c = c.NextSibling() {
		ls := r.block(c)
		if len(ls) == 0 || blank(ls) {
			continue
		}
		out = append(out, ls)
	}
	return out
}

func blank(ls []line) bool {
	for _, l := range ls {
		if strings.TrimSpace(l.text) != "" {
			return false
		}
	}
	return true
}

func joinLines(ls []line) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.text)
	}
	return b.String()
}

// Render converts a whole Markdown document to one mrkdwn string, with
// top-level blocks separated by a blank line. It ignores Slack's size limits;
// use Blocks to post.
func Render(md []byte) string {
	blocks := renderBlocks(md)
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = joinLines(b)
	}
	return strip(strings.Join(parts, "\n\n"))
}

func (r *renderer) block(n ast.Node) []line {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		return textLines(r.inlines(n, style{}))
	case *ast.Heading:
		// Headings become bold lines; bold inside them is dropped because
		// Slack cannot nest `*`.
		var out []line
		for _, l := range strings.Split(r.inlines(n, style{bold: true}), "\n") {
			if l = wrap(l, "*"); l != "" {
				out = append(out, line{text: l})
			}
		}
		return out
	case *ast.ThematicBreak:
		return []line{{text: thematicBreak}}
	case *ast.CodeBlock, *ast.FencedCodeBlock:
		return codeLines(r.rawLines(n, false))
	case *ast.HTMLBlock:
		// Raw HTML is shown, never interpreted.
		return textLines(esc(strings.TrimRight(strings.Join(r.rawLines(n, true), "\n"), "\n")))
	case *ast.Blockquote:
		return prefix(r.container(n, false), "> ", "> ")
	case *ast.List:
		return r.list(n)
	case *east.Table:
		return r.table(n)
	}
	if n.FirstChild() != nil && n.FirstChild().Type() == ast.TypeBlock {
		return r.container(n, false)
	}
	return textLines(r.inlines(n, style{}))
}

func textLines(s string) []line {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "\n")
	out := make([]line, len(parts))
	for i, p := range parts {
		out[i] = line{text: p}
	}
	return out
}

// codeLines fences already-unescaped code lines. Slack ignores a language
// tag, so none is emitted.
func codeLines(code []string) []line {
	for len(code) > 0 && code[len(code)-1] == "" {
		code = code[:len(code)-1]
	}
	if len(code) == 0 {
		return nil
	}
	out := make([]line, 0, len(code)+2)
	out = append(out, line{text: "```", inCode: true})
	for _, c := range code {
		out = append(out, line{text: esc(c), inCode: true})
	}
	return append(out, line{text: "```"})
}

func (r *renderer) rawLines(n ast.Node, closure bool) []string {
	var b strings.Builder
	segs := n.Lines()
	for i := 0; i < segs.Len(); i++ {
		s := segs.At(i)
		b.Write(s.Value(r.src))
	}
	if h, ok := n.(*ast.HTMLBlock); closure && ok && h.HasClosure() {
		b.Write(h.ClosureLine.Value(r.src))
	}
	s := strings.ReplaceAll(b.String(), "\r\n", "\n")
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

// container renders child blocks, separated by a blank line unless tight.
func (r *renderer) container(n ast.Node, tight bool) []line {
	var out []line
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		ls := r.block(c)
		if len(ls) == 0 {
			continue
		}
		if len(out) > 0 && !tight {
			out = append(out, line{})
		}
		out = append(out, ls...)
	}
	return out
}

// prefix puts first before the first line and rest before the others; blank
// lines lose the prefix's trailing spaces so Slack does not see stray
// whitespace.
func prefix(ls []line, first, rest string) []line {
	out := make([]line, len(ls))
	for i, l := range ls {
		p := rest
		if i == 0 {
			p = first
		}
		t := p + l.text
		if l.text == "" {
			t = strings.TrimRight(p, " ")
		}
		out[i] = line{text: t, inCode: l.inCode, fence: rest + l.fence}
	}
	return out
}

func (r *renderer) list(n *ast.List) []line {
	var out []line
	num := n.Start
	for item := n.FirstChild(); item != nil; item = item.NextSibling() {
		marker := "•"
		if n.IsOrdered() {
			marker = strconv.Itoa(num) + "."
			num++
		}
		ls := r.container(item, n.IsTight)
		if len(ls) == 0 {
			ls = []line{{}}
		}
		if len(out) > 0 && !n.IsTight {
			out = append(out, line{})
		}
		out = append(out, prefix(ls, marker+" ", listIndent)...)
	}
	return out
}

// table renders a GFM table as preformatted text: Slack has no tables, and a
// monospace grid is the only layout that survives.
func (r *renderer) table(n *east.Table) []line {
	var rows [][]string
	for row := n.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for c := row.FirstChild(); c != nil; c = c.NextSibling() {
			cells = append(cells, strings.TrimSpace(r.plain(c)))
		}
		rows = append(rows, cells)
	}
	var widths []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	format := func(cells []string) string {
		var b strings.Builder
		for i, w := range widths {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", w-utf8.RuneCountInString(c)))
		}
		return strings.TrimRight(b.String(), " ")
	}
	var code []string
	for i, row := range rows {
		code = append(code, format(row))
		if i == 0 {
			seps := make([]string, len(widths))
			for j, w := range widths {
				seps[j] = strings.Repeat("-", max(w, 1))
			}
			code = append(code, strings.Join(seps, "-+-"))
		}
	}
	return codeLines(code)
}

// style records which markers are already open, because Slack cannot nest a
// marker inside itself (`*a *b* c*`).
type style struct{ bold, italic, strike bool }

func (r *renderer) inlines(n ast.Node, st style) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(&b, c, st)
	}
	return b.String()
}

func (r *renderer) inline(b *strings.Builder, n ast.Node, st style) {
	switch n := n.(type) {
	case *ast.Text:
		v := n.Segment.Value(r.src)
		if n.IsRaw() {
			b.WriteString(esc(string(v)))
		} else {
			b.WriteString(esc(r.unescape(v)))
		}
		if n.HardLineBreak() || n.SoftLineBreak() {
			// CommonMark joins a soft break into a space, but Slack keeps
			// every newline as a line break, and its people (and models
			// writing for them) put one where they mean it: "• a\n• b" is
			// two lines to whoever typed it.
			b.WriteByte('\n')
		}
	case *ast.String:
		if n.IsCode() || n.IsRaw() {
			b.WriteString(esc(string(n.Value)))
		} else {
			b.WriteString(esc(r.unescape(n.Value)))
		}
	case *ast.CodeSpan:
		if c := codeSpan(r.src, n); strings.TrimSpace(c) != "" {
			b.WriteString(atom("`" + esc(c) + "`"))
		} else {
			b.WriteString(c)
		}
	case *ast.Emphasis:
		if n.Level >= 2 {
			s := st
			s.bold = true
			inner := r.inlines(n, s)
			if st.bold {
				b.WriteString(inner)
			} else {
				b.WriteString(wrapLines(inner, "*"))
			}
			return
		}
		s := st
		s.italic = true
		inner := r.inlines(n, s)
		if st.italic {
			b.WriteString(inner)
		} else {
			b.WriteString(wrapLines(inner, "_"))
		}
	case *east.Strikethrough:
		s := st
		s.strike = true
		inner := r.inlines(n, s)
		if st.strike {
			b.WriteString(inner)
		} else {
			b.WriteString(wrapLines(inner, "~"))
		}
	case *ast.Link:
		if u, ok := r.safeURL(n.Destination); ok {
			b.WriteString(atom(link(u, r.plain(n))))
		} else {
			b.WriteString(r.inlines(n, st))
		}
	case *ast.Image:
		if u, ok := r.safeURL(n.Destination); ok {
			b.WriteString(atom(link(u, r.plain(n))))
		} else {
			b.WriteString(esc(r.plain(n)))
		}
	case *ast.AutoLink:
		label := string(n.Label(r.src))
		u := autoLinkURL(r.src, n)
		if su, ok := checkURL(u); ok {
			b.WriteString(atom(link(su, label)))
		} else {
			b.WriteString(esc(label))
		}
	case *ast.RawHTML:
		b.WriteString(esc(rawHTML(r.src, n)))
	default:
		b.WriteString(r.inlines(n, st))
	}
}

func codeSpan(src []byte, n ast.Node) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		if t, ok := c.(*ast.Text); ok {
			b.Write(t.Segment.Value(src))
		} else if s, ok := c.(*ast.String); ok {
			b.Write(s.Value)
		}
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

func rawHTML(src []byte, n *ast.RawHTML) string {
	var b strings.Builder
	for i := 0; i < n.Segments.Len(); i++ {
		s := n.Segments.At(i)
		b.Write(s.Value(src))
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

func autoLinkURL(src []byte, n *ast.AutoLink) string {
	u := string(n.URL(src))
	lower := strings.ToLower(u)
	if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(lower, "mailto:") {
		return "mailto:" + u
	}
	if n.AutoLinkType == ast.AutoLinkURL && strings.HasPrefix(lower, "www.") {
		return "http://" + u
	}
	return u
}

// wrapLines wraps each line separately: Slack formatting never spans a
// newline.
func wrapLines(s, marker string) string {
	if !strings.Contains(s, "\n") {
		return wrap(s, marker)
	}
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = wrap(p, marker)
	}
	return strings.Join(parts, "\n")
}

// wrap puts marker around s with surrounding whitespace moved outside:
// Slack ignores `* x*`, and an empty `**` would be literal text. The markers
// carry sentinels so that the splitter can close and reopen the span.
func wrap(s, marker string) string {
	core := strings.TrimSpace(s)
	if core == "" {
		return s
	}
	i := strings.Index(s, core)
	return s[:i] + string(markOpen) + marker + core + string(markClose) + marker + s[i+len(core):]
}

// link builds Slack's <url|label>. url is already escaped and sanitised;
// label is plain text. Newlines would end the link, so they become spaces.
func link(url, label string) string {
	label = strings.Join(strings.Fields(label), " ")
	l := strings.ReplaceAll(esc(label), "|", labelBar)
	if l == "" || l == url {
		return "<" + url + ">"
	}
	return "<" + url + "|" + l + ">"
}

func (r *renderer) safeURL(dest []byte) (string, bool) {
	return checkURL(r.unescape(dest))
}

// checkURL admits only schemes Slack can open safely; anything else
// (javascript:, data:, relative paths) is rendered as plain text. Characters
// that would end the <url|label> syntax are percent-encoded, then the URL is
// entity-escaped like all text (Slack decodes it).
func checkURL(u string) (string, bool) {
	u = strings.TrimSpace(u)
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "http://") && len(u) > len("http://"):
	case strings.HasPrefix(lower, "https://") && len(u) > len("https://"):
	case strings.HasPrefix(lower, "mailto:") && len(u) > len("mailto:"):
	default:
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c <= ' ' || c == 0x7f || c == '|' || c == '<' || c == '>' || c == '"':
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)) +
				strings.ToUpper(strconv.FormatUint(uint64(c)&0xf, 16)))
		default:
			b.WriteByte(c)
		}
	}
	return esc(b.String()), true
}

// unescape resolves backslash escapes and entity references exactly as
// goldmark's HTML renderer does, by reusing its writer and decoding the HTML
// it produces; re-implementing CommonMark's entity table would drift.
func (r *renderer) unescape(v []byte) string {
	if bytes.IndexAny(v, "\\&\x00") < 0 {
		return string(v)
	}
	r.buf.Reset()
	html.DefaultWriter.Write(r.w, v)
	_ = r.w.Flush()
	return stdhtml.UnescapeString(r.buf.String())
}

// plain returns the unescaped text of an inline subtree, for places where
// Slack cannot carry formatting (link labels, table cells, notifications).
func (r *renderer) plain(n ast.Node) string {
	var b strings.Builder
	r.plainTo(&b, n)
	return b.String()
}

func (r *renderer) plainTo(b *strings.Builder, n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			v := c.Segment.Value(r.src)
			if c.IsRaw() {
				b.Write(v)
			} else {
				b.WriteString(r.unescape(v))
			}
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			if c.IsCode() || c.IsRaw() {
				b.Write(c.Value)
			} else {
				b.WriteString(r.unescape(c.Value))
			}
		case *ast.CodeSpan:
			b.WriteString(codeSpan(r.src, c))
		case *ast.AutoLink:
			b.Write(c.Label(r.src))
		case *ast.RawHTML:
			b.WriteString(rawHTML(r.src, c))
		default:
			r.plainTo(b, c)
		}
	}
}
