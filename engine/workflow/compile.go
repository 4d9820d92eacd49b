package workflow

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"

	"github.com/holdfast-bot/holdfast/engine/workflow/mdlimit"
)

// MaxSourceBytes bounds what Compile will parse. Workflow memos are a page or
// two; anything this large is a mistake, and refusing it keeps a stray paste
// from stalling every run that recompiles it.
const MaxSourceBytes = 1 << 20

// mdParser is shared because goldmark parsers keep no per-parse state. It is
// goldmark's CommonMark parser with its superlinear constructs metered (see
// package mdlimit): the compiler runs on every run, server start and Gate
// edit, so one pathological memo must not cost seconds each time.
var mdParser = mdlimit.NewParser()

// parseMarkdown parses src, reporting the markdown limits it hit.
func parseMarkdown(src []byte) (ast.Node, []mdlimit.Overrun) {
	pc := parser.NewContext()
	doc := mdParser.Parse(text.NewReader(src), parser.WithContext(pc))
	return doc, mdlimit.Overruns(pc)
}

// normalizeCR turns each bare CR (one not followed by LF) into LF.
// CommonMark ends a line at LF, CRLF or a lone CR, but goldmark only splits
// lines at LF, so a memo saved with classic Mac line endings would parse as
// one line: its title the whole document, every error on line 1. The
// replacement keeps every byte offset, so line numbers and values read from
// the result are those of src. src itself is never modified.
func normalizeCR(src []byte) []byte {
	var out []byte
	for i, b := range src {
		if b == '\r' && (i+1 == len(src) || src[i+1] != '\n') {
			if out == nil {
				out = bytes.Clone(src)
			}
			out[i] = '\n'
		}
	}
	if out == nil {
		return src
	}
	return out
}

// Section names as authors write them; the map key is the normalised form.
var sectionNames = map[string]string{
	"trigger":       "Trigger",
	"load contract": "Load Contract",
	"steps":         "Steps",
	"policy":        "Policy",
}

var sectionOrder = []string{"trigger", "load contract", "steps", "policy"}

// Compile turns a workflow memo into a manifest, or reports every problem it
// found. The manifest is nil exactly when errors are returned, so callers can
// never run a half-understood workflow. Compile never panics: should the
// compiler itself have a bug, it surfaces as an error on line 1 instead of
// taking down the runner that recompiles workflows on every run.
func Compile(src []byte, opts Options) (m *Manifest, errs Errors) {
	defer func() {
		if r := recover(); r != nil {
			m = nil
			errs = Errors{{Line: 1, Message: fmt.Sprintf("internal compiler error (please report): %v", r)}}
		}
	}()
	return compile(src, opts)
}

type section struct {
	name  string // normalised
	line  int
	nodes []ast.Node
}

type compiler struct {
	src        []byte
	lineStarts []int
	opts       Options
	errs       Errors
	m          *Manifest

	promptExcused map[int]bool // step lines whose missing prompt is already explained
}

// compile is Compile without the recover, so that the fuzz target sees real
// panics instead of the safety net.
func compile(src []byte, opts Options) (*Manifest, Errors) {
	c := &compiler{src: src, opts: opts}
	return c.compile()
}

// CommandOf returns the Command a memo declares even when the memo has other
// errors, so a broken workflow stays listed, and re-importable, under the
// command its author knows. It is "" when no valid Command can be read.
func CommandOf(src []byte) (cmd string) {
	defer func() {
		if recover() != nil {
			cmd = ""
		}
	}()
	c := &compiler{src: src}
	c.compile()
	if c.m == nil {
		return ""
	}
	return c.m.Command
}

func (c *compiler) compile() (*Manifest, Errors) {
	src := c.src
	if len(src) > MaxSourceBytes {
		c.errorf(1, "workflow memo is %d bytes; the limit is %d", len(src), MaxSourceBytes)
		return nil, c.errs
	}
	src = normalizeCR(src)
	c.src = src
	c.lineStarts = append(c.lineStarts, 0)
	for i, b := range src {
		if b == '\n' {
			c.lineStarts = append(c.lineStarts, i+1)
		}
	}
	c.m = &Manifest{Loads: []Load{}, Steps: []Step{}, Policy: DefaultPolicy()}

	doc, overruns := parseMarkdown(src)
	c.markdownLimits(overruns)
	sections := map[string]*section{}
	var cur *section
	titleSet := false
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		h, ok := n.(*ast.Heading)
		if !ok {
			if cur != nil {
				cur.nodes = append(cur.nodes, n)
			}
			continue
		}
		switch {
		case h.Level == 1:
			if !titleSet {
				c.m.Title = c.inlineText(h)
				titleSet = true
			}
			cur = nil
		case h.Level == 2:
			raw := c.inlineText(h)
			name := normName(raw)
			line := c.line(h)
			if _, known := sectionNames[name]; !known {
				c.errorf(line, "unknown section %q; a workflow has exactly these ## sections: Trigger, Load Contract, Steps, Policy", raw)
				cur = nil
				continue
			}
			if prev, dup := sections[name]; dup {
				c.errorf(line, "duplicate section ## %s (first at line %d); merge them into one", sectionNames[name], prev.line)
				cur = nil
				continue
			}
			cur = &section{name: name, line: line}
			sections[name] = cur
		default:
			// Deeper headings are the author's own structure inside a
			// section; their content still belongs to the section.
		}
	}
	for _, name := range sectionOrder {
		if _, ok := sections[name]; !ok {
			c.errorf(1, "missing section ## %s", sectionNames[name])
		}
	}
	if s := sections["trigger"]; s != nil {
		c.trigger(s)
	}
	if s := sections["load contract"]; s != nil {
		c.loads(s)
	}
	if s := sections["steps"]; s != nil {
		c.steps(s)
	}
	if s := sections["policy"]; s != nil {
		c.policy(s)
	}
	if len(c.errs) > 0 {
		c.errs.sort()
		return nil, c.errs
	}
	return c.m, nil
}

// markdownLimits reports where the memo went past the markdown parser's
// limits (package mdlimit). Past a limit the parser reads markup as text, so
// the compiler would be judging a memo other than the one the author sees
// rendered; refusing it, with the line, is the honest answer. No workflow
// comes near these limits: they stop pathological input, which would
// otherwise cost seconds on every run that recompiles the memo.
func (c *compiler) markdownLimits(overruns []mdlimit.Overrun) {
	for _, o := range overruns {
		var msg string
		switch o.Kind {
		case mdlimit.Nesting:
			msg = fmt.Sprintf("block quotes and lists nested more than %d deep; the compiler reads no deeper, so flatten them", mdlimit.MaxNesting)
		case mdlimit.Emphasis:
			msg = "more emphasis markers (* and _) than the compiler matches in one memo; from this paragraph on they are read as text, so escape them as \\* and \\_ or remove them"
		case mdlimit.Links:
			msg = "more link brackets than the compiler resolves in one memo; from this paragraph on ] is read as text, so escape brackets as \\[ and \\] or remove them"
		case mdlimit.CodeSpans:
			msg = "more unclosed code spans (`) than the compiler scans in one memo; from this paragraph on ` is read as text, so close them or escape them as \\`"
		case mdlimit.References:
			msg = "more link reference definitions in one paragraph than the compiler reads; put blank lines between them"
		default:
			msg = "markdown limit exceeded: " + o.Kind.String()
		}
		if o.Count > 1 {
			msg += fmt.Sprintf(" (%d places in all)", o.Count)
		}
		c.errorf(c.lineOf(o.Offset), "%s", msg)
	}
}

func (c *compiler) errorf(line int, format string, args ...any) {
	if line < 1 {
		line = 1
	}
	c.errs = append(c.errs, Error{Line: line, Message: fmt.Sprintf(format, args...)})
}

// lineOf maps a byte offset to a 1-based line.
func (c *compiler) lineOf(off int) int {
	if off < 0 {
		return 1
	}
	i := sort.Search(len(c.lineStarts), func(i int) bool { return c.lineStarts[i] > off })
	return max(i, 1)
}

type liner interface{ Lines() *text.Segments }

// line finds the first source line of n. Not every goldmark node records a
// position, so it falls back to the node's text lines, then its descendants,
// then its ancestors.
func (c *compiler) line(n ast.Node) int {
	for cur := n; cur != nil; cur = cur.Parent() {
		if p := cur.Pos(); p >= 0 {
			return c.lineOf(p)
		}
		if l, ok := cur.(liner); ok && cur.Type() == ast.TypeBlock {
			if segs := l.Lines(); segs != nil && segs.Len() > 0 {
				return c.lineOf(segs.At(0).Start)
			}
		}
		for ch := cur.FirstChild(); ch != nil; ch = ch.FirstChild() {
			if p := ch.Pos(); p >= 0 {
				return c.lineOf(p)
			}
		}
	}
	return 1
}

// inlineText flattens inline content to plain text. Code spans contribute
// their content without backticks, which is how field values like `live`
// lose their quoting.
func (c *compiler) inlineText(n ast.Node) string {
	var b strings.Builder
	c.writeInline(&b, n)
	return strings.TrimSpace(b.String())
}

func (c *compiler) writeInline(b *strings.Builder, n ast.Node) {
	for ch := n.FirstChild(); ch != nil; ch = ch.NextSibling() {
		c.writeNode(b, ch)
	}
}

func (c *compiler) writeNode(b *strings.Builder, n ast.Node) {
	switch v := n.(type) {
	case *ast.Text:
		b.Write(v.Value(c.src))
		if v.SoftLineBreak() || v.HardLineBreak() {
			b.WriteByte(' ')
		}
	case *ast.String:
		b.Write(v.Value)
	case *ast.AutoLink:
		b.Write(v.Label(c.src))
	case *ast.RawHTML:
		if v.Segments != nil {
			for i := 0; i < v.Segments.Len(); i++ {
				seg := v.Segments.At(i)
				b.Write(seg.Value(c.src))
			}
		}
	default:
		c.writeInline(b, n)
	}
}

var nameSeparators = strings.NewReplacer("_", " ", "-", " ")

// normName folds the spellings authors use for the same name: case, runs of
// spaces, and - or _ between words.
func normName(s string) string {
	s = nameSeparators.Replace(strings.ToLower(strings.TrimSpace(s)))
	return strings.Join(strings.Fields(s), " ")
}

// field is one `- **Name** value` list item.
type field struct {
	raw   string // name as written
	name  string // normalised
	value string
	line  int
}

// leadingStrong returns the paragraph's bold lead-in and the inline node
// after it, or nil when the paragraph does not start with bold text.
func leadingStrong(para ast.Node) (*ast.Emphasis, ast.Node) {
	first := para.FirstChild()
	em, ok := first.(*ast.Emphasis)
	if !ok || em.Level != 2 {
		return nil, nil
	}
	return em, em.NextSibling()
}

// firstPara returns the item's leading text block, if it has one.
func firstPara(item ast.Node) ast.Node {
	switch p := item.FirstChild().(type) {
	case *ast.TextBlock, *ast.Paragraph:
		return p
	}
	return nil
}

// splitLead reads `**Name** rest` from a paragraph: the bold name (with an
// optional trailing colon dropped) and the rest as plain text.
func (c *compiler) splitLead(para ast.Node) (name, rest string, ok bool) {
	em, after := leadingStrong(para)
	if em == nil {
		return "", "", false
	}
	name = strings.TrimSpace(strings.TrimSuffix(c.inlineText(em), ":"))
	var b strings.Builder
	for n := after; n != nil; n = n.NextSibling() {
		c.writeNode(&b, n)
	}
	rest = strings.TrimSpace(b.String())
	rest = strings.TrimSpace(strings.TrimPrefix(rest, ":"))
	return name, rest, name != ""
}

// fields collects the field items of a section. Prose paragraphs are allowed
// (authors explain their workflows), but a paragraph that looks like a field
// is flagged because it would otherwise be silently ignored.
func (c *compiler) fields(s *section, want string) []field {
	var out []field
	for _, n := range s.nodes {
		switch v := n.(type) {
		case *ast.List:
			for it := v.FirstChild(); it != nil; it = it.NextSibling() {
				line := c.line(it)
				para := firstPara(it)
				if para == nil {
					c.errorf(line, "expected a field like `- **Name** value` in ## %s", sectionNames[s.name])
					continue
				}
				name, value, ok := c.splitLead(para)
				if !ok {
					c.errorf(line, "expected a field like `- **Name** value` in ## %s; put the field name in bold (one of %s)", sectionNames[s.name], want)
					continue
				}
				out = append(out, field{raw: name, name: normName(name), value: value, line: line})
			}
		case *ast.Paragraph:
			if name, _, ok := c.splitLead(v); ok {
				c.errorf(c.line(v), "field %q must be a list item; write `- **%s** value`", name, name)
			}
		case *ast.FencedCodeBlock:
			c.errorf(c.line(v), "unexpected code block in ## %s; code blocks belong inside a step", sectionNames[s.name])
		}
	}
	return out
}

// once reports a duplicate of a single-valued field and tells the caller
// whether to apply it.
func (c *compiler) once(seen map[string]int, f field, section string) bool {
	if first, dup := seen[f.name]; dup {
		c.errorf(f.line, "duplicate field %s in ## %s (first at line %d); it may appear only once", f.raw, section, first)
		return false
	}
	seen[f.name] = f.line
	return true
}

func (c *compiler) unknownField(f field, section, allowed string) {
	c.errorf(f.line, "unknown field %q in ## %s; allowed fields are %s", f.raw, section, allowed)
}

// fenced returns a fenced block's language and body, one string per line
// with the line number of each.
func (c *compiler) fenced(fc *ast.FencedCodeBlock) (lang string, lines []string, lineNos []int) {
	lang = strings.ToLower(string(bytes.TrimSpace(fc.Language(c.src))))
	segs := fc.Lines()
	for i := 0; i < segs.Len(); i++ {
		seg := segs.At(i)
		lines = append(lines, string(seg.Value(c.src)))
		lineNos = append(lineNos, c.lineOf(seg.Start))
	}
	return lang, lines, lineNos
}
