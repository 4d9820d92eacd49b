// Package mdlimit bounds the work goldmark does on one markdown document.
//
// goldmark follows CommonMark faithfully, but a few of its algorithms cost
// more than linear time on shapes anyone can paste into a memo (bodies may be
// 1 MiB, SPEC §7). Measured with goldmark v1.8.7:
//
//   - Nested block containers. For every block quote or list item it opens or
//     continues on a line, goldmark recomputes the line's column by scanning
//     from the line's start, so a line of d markers costs d²: 200,000 `>`
//     took 16 s; `- - - …`, `1. 1. …` and `> - > - …` alike; one more level
//     per line by indentation grows as n^1.5 (1.3 s at 1 MB).
//   - Emphasis. Delimiter matching has no "openers bottom": a closer that
//     matches nothing scans every earlier delimiter of its paragraph, so
//     100 KB of `*a_` took 11 s (goldmark issue #555 is the mixed form).
//   - Links. Every `]` that fails to make a link rescans the rest of its
//     paragraph for a destination, title or label: 200 KB of `![a](` took 8 s,
//     of `[a](b "` lines 0.8 s, and deep `[[[…]]]` about 7 µs per bracket.
//   - Code spans. A backtick run with no closing run of its length scans the
//     rest of its paragraph, once per run length: n^1.5, 0.4 s at 1 MB.
//   - Link reference definitions. Each definition found re-slices the rest of
//     its paragraph, so 1 MB of definitions took 6 s.
//
// A workflow memo is recompiled on every run, on every server start and on
// every edit of a memo it names, and the console renders every memo it shows,
// so that cost was paid over and over (a 200 KB memo made its own run look
// stuck). Rather than parse markdown ourselves, NewParser returns goldmark's
// parser with these constructs metered where goldmark does the work: wrappers
// around its block quote and list parsers, its link and code span parsers,
// every parser that makes emphasis-like delimiters (GFM's strikethrough
// too), and its reference-definition transformer. Past a limit the construct
// is not recognised and its markers stay literal text, so nothing is dropped
// and the document still parses in linear time. Overruns says where a limit
// was hit, so a caller that must not guess (the workflow compiler) can refuse
// the document with an error on that line, while a renderer shows it as is.
//
// The limits sit far beyond what people write: MaxNesting levels of quoting
// and lists, and budgets that grow with the document (see the budget
// functions) which an ordinary memo spends a small fraction of.
package mdlimit

import (
	"sort"
	"sync"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// MaxNesting is how many block quotes and list items may contain one
// another. Deeper markers on a line are read as text.
const MaxNesting = 32

// Kind names the limit an Overrun hit.
type Kind int

const (
	// Nesting: a block quote or list would have opened more than MaxNesting
	// deep.
	Nesting Kind = iota + 1
	// Emphasis: the document's emphasis budget (`*`, `_`, and `~` with GFM)
	// ran out; later closing markers are text.
	Emphasis
	// Links: the document's link budget ran out; later `]` are text.
	Links
	// CodeSpans: the document's code span budget ran out; later backtick
	// runs are text.
	CodeSpans
	// References: the document's reference-definition budget ran out; the
	// paragraph's definitions are text.
	References
	numKinds
)

func (k Kind) String() string {
	switch k {
	case Nesting:
		return "nesting"
	case Emphasis:
		return "emphasis"
	case Links:
		return "links"
	case CodeSpans:
		return "code spans"
	case References:
		return "reference definitions"
	}
	return "unknown"
}

// Overrun is one limit a parse hit.
type Overrun struct {
	Kind Kind
	// Offset is the byte offset in the source where it was first hit: the
	// marker that would have nested too deep, or the start of the paragraph
	// in which a budget ran out.
	Offset int
	// Count is how many markers (or, for References, paragraphs) the limit
	// turned into text.
	Count int
}

// The budgets are in units of goldmark's inner-loop steps (a delimiter or a
// byte looked at), each a nanosecond or a few: a document may spend a fixed
// allowance plus a few steps per byte, so the metered work is linear in its
// size (tens of milliseconds at 1 MiB, on top of goldmark's own linear pass)
// while an ordinary memo spends a small fraction of it.

// emphasisBudget bounds delimiter matching. A closing marker is charged the
// number of markers before it in its paragraph, the most goldmark may scan to
// match it; `some **bold** words` costs 1.
func emphasisBudget(srcLen int) int { return 1<<20 + 2*srcLen }

// linkBudget bounds link parsing. A link is charged the bytes it spans, and
// a `]` that makes no link the size of its paragraph, the most goldmark may
// have scanned to find that out: `[1]` in a 1 KB paragraph costs 1 K.
func linkBudget(srcLen int) int { return 4<<20 + 16*srcLen }

// codeSpanBudget bounds code span parsing. A code span is charged the bytes
// it spans, and a backtick run that opens none the rest of its paragraph,
// which goldmark scanned for a closing run.
func codeSpanBudget(srcLen int) int { return 4<<20 + 16*srcLen }

// referenceBudget bounds reference-definition extraction. A paragraph that
// starts with `[` is charged the square of its line count, its worst case;
// ten definitions in a row cost 100.
func referenceBudget(int) int { return 4 << 20 }

// state is one parse's meter, kept in its parser.Context.
type state struct {
	emphasisLeft, linkLeft, codeSpanLeft, referenceLeft int
	overruns                                            [numKinds]Overrun

	block      ast.Node // the leaf block whose inlines are being parsed
	blockStart int
	blockSize  int
	blockDelim int          // the most delimiters block's list can hold so far
	openers    map[byte]int // delimiters that can open, in block, by character
	openLabels int          // link labels (`[`, `![`) open in block
}

var stateKey = parser.NewContextKey()

func newState(srcLen int) *state {
	return &state{
		emphasisLeft:  emphasisBudget(srcLen),
		linkLeft:      linkBudget(srcLen),
		codeSpanLeft:  codeSpanBudget(srcLen),
		referenceLeft: referenceBudget(srcLen),
	}
}

func stateOf(pc parser.Context) *state {
	return pc.ComputeIfAbsent(stateKey, func() any { return newState(0) }).(*state)
}

func (s *state) overrun(k Kind, offset int) {
	o := &s.overruns[k]
	if o.Count == 0 {
		*o = Overrun{Kind: k, Offset: offset}
	}
	o.Count++
}

// enter notes the leaf block whose inlines are being parsed.
func (s *state) enter(block ast.Node) {
	if block == s.block {
		return
	}
	s.block, s.blockStart, s.blockSize, s.blockDelim, s.openLabels = block, 0, 0, 0, 0
	clear(s.openers)
	if lines := block.Lines(); lines != nil && lines.Len() > 0 {
		s.blockStart = lines.At(0).Start
		s.blockSize = lines.At(lines.Len()-1).Stop - s.blockStart
	}
}

// Overruns reports the limits hit by the parse that used pc, in source
// order; nil when there were none.
func Overruns(pc parser.Context) []Overrun {
	s, _ := pc.Get(stateKey).(*state)
	if s == nil {
		return nil
	}
	var out []Overrun
	for _, o := range s.overruns {
		if o.Count > 0 {
			out = append(out, o)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// NewParser returns a parser with goldmark's default (CommonMark) parsers,
// plus opts, metered as the package describes. Extensions add to it as to
// goldmark's own parser: pass it with goldmark.WithParser before
// goldmark.WithExtensions. As with goldmark's parser, options must all be
// added before the first Parse; it is then safe for concurrent use.
func NewParser(opts ...parser.Option) parser.Parser {
	p := &meteredParser{config: parser.NewConfig()}
	p.AddOptions(
		parser.WithBlockParsers(parser.DefaultBlockParsers()...),
		parser.WithInlineParsers(parser.DefaultInlineParsers()...),
		parser.WithParagraphTransformers(parser.DefaultParagraphTransformers()...),
	)
	p.AddOptions(opts...)
	return p
}

type meteredParser struct {
	mu     sync.Mutex
	config *parser.Config // collected options; nil once built
	inner  parser.Parser
}

func (p *meteredParser) AddOptions(opts ...parser.Option) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.config == nil {
		panic("mdlimit: AddOptions after the first Parse")
	}
	for _, o := range opts {
		o.SetParserOption(p.config)
	}
}

func (p *meteredParser) Parse(reader text.Reader, opts ...parser.ParseOption) ast.Node {
	p.mu.Lock()
	if p.inner == nil {
		p.inner = buildParser(p.config)
		p.config = nil
	}
	inner := p.inner
	p.mu.Unlock()

	var cfg parser.ParseConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Context == nil {
		cfg.Context = parser.NewContext()
		opts = append(opts, parser.WithContext(cfg.Context))
	}
	cfg.Context.Set(stateKey, newState(len(reader.Source())))
	return inner.Parse(reader, opts...)
}

// buildParser makes goldmark's parser from the collected configuration, with the
// costly parsers wrapped.
func buildParser(cfg *parser.Config) parser.Parser {
	blockquote, list := any(parser.NewBlockquoteParser()), any(parser.NewListParser())
	var blocks, inlines, paragraphs util.PrioritizedSlice
	for _, v := range cfg.BlockParsers {
		if v.Value == blockquote || v.Value == list {
			v.Value = &nestingGate{BlockParser: v.Value.(parser.BlockParser)}
		}
		blocks = append(blocks, v)
	}
	link, codeSpan := any(parser.NewLinkParser()), any(parser.NewCodeSpanParser())
	for _, v := range cfg.InlineParsers {
		ip := v.Value.(parser.InlineParser)
		g := inlineGate{InlineParser: ip}
		switch v.Value {
		case link:
			g.kind = Links
		case codeSpan:
			g.kind = CodeSpans
		}
		if cb, ok := ip.(parser.CloseBlocker); ok {
			v.Value = &closingInlineGate{inlineGate: g, closer: cb}
		} else {
			v.Value = &g
		}
		inlines = append(inlines, v)
	}
	refs := any(parser.LinkReferenceParagraphTransformer)
	for _, v := range cfg.ParagraphTransformers {
		if v.Value == refs {
			v.Value = &referenceGate{ParagraphTransformer: v.Value.(parser.ParagraphTransformer)}
		}
		paragraphs = append(paragraphs, v)
	}
	opts := []parser.Option{
		parser.WithBlockParsers(blocks...),
		parser.WithInlineParsers(inlines...),
		parser.WithParagraphTransformers(paragraphs...),
		parser.WithASTTransformers(cfg.ASTTransformers...),
	}
	for name, value := range cfg.Options {
		opts = append(opts, parser.WithOption(name, value))
	}
	if cfg.EscapedSpace {
		opts = append(opts, parser.WithEscapedSpace())
	}
	return parser.NewParser(opts...)
}

// setOption passes an option on to a wrapped parser that takes options.
func setOption(v any, name parser.OptionName, value any) {
	if so, ok := v.(parser.SetOptioner); ok {
		so.SetOption(name, value)
	}
}

// nestingGate keeps a container parser (block quotes, lists) from opening a
// container more than MaxNesting deep. Refused, the line's remaining markers
// become the text of a paragraph at the deepest allowed level.
type nestingGate struct{ parser.BlockParser }

func (g *nestingGate) SetOption(name parser.OptionName, value any) {
	setOption(g.BlockParser, name, value)
}

func (g *nestingGate) Open(parent ast.Node, reader text.Reader, pc parser.Context) (ast.Node, parser.State) {
	if depth(parent) < MaxNesting {
		return g.BlockParser.Open(parent, reader, pc)
	}
	// Ask the parser first, so that a line that would not have opened
	// anything (a list parser sees every line starting with a digit) is not
	// reported, then put the reader back.
	line, pos := reader.Position()
	n, _ := g.BlockParser.Open(parent, reader, pc)
	if n == nil {
		return nil, parser.NoChildren
	}
	reader.SetPosition(line, pos)
	stateOf(pc).overrun(Nesting, pos.Start)
	return nil, parser.NoChildren
}

// depth counts the block quotes and list items around n. It stops counting
// at MaxNesting, the most the gates let there be.
func depth(n ast.Node) int {
	d := 0
	for ; n != nil && d < MaxNesting; n = n.Parent() {
		if k := n.Kind(); k == ast.KindBlockquote || k == ast.KindListItem {
			d++
		}
	}
	return d
}

// inlineGate meters one inline parser: the link parser, the code span
// parser, and the delimiters that emphasis-like parsers (emphasis, GFM
// strikethrough) produce.
type inlineGate struct {
	parser.InlineParser
	kind Kind // Links or CodeSpans for those parsers, else 0
}

func (g *inlineGate) SetOption(name parser.OptionName, value any) {
	setOption(g.InlineParser, name, value)
}

func (g *inlineGate) Parse(parent ast.Node, block text.Reader, pc parser.Context) ast.Node {
	s := stateOf(pc)
	s.enter(parent)
	switch g.kind {
	case Links:
		return g.parseLink(s, parent, block, pc)
	case CodeSpans:
		return g.parseCodeSpan(s, parent, block, pc)
	}
	n := g.InlineParser.Parse(parent, block, pc)
	if d, ok := n.(*parser.Delimiter); ok {
		s.delimiter(d)
	}
	return n
}

// parseLink meters the link parser. `[` and `![` only push a label; a `]`
// closes the latest open one and does the scanning. A link it makes is
// charged the bytes it spans; a `]` that makes none is charged its whole
// paragraph, the most goldmark may have scanned looking for a destination,
// title or label. Once the budget is spent, `]` is text.
func (g *inlineGate) parseLink(s *state, parent ast.Node, block text.Reader, pc parser.Context) ast.Node {
	line, _ := block.PeekLine()
	if len(line) == 0 || line[0] != ']' {
		n := g.InlineParser.Parse(parent, block, pc)
		if n != nil {
			s.openLabels++
		}
		return n
	}
	if s.openLabels == 0 {
		return g.InlineParser.Parse(parent, block, pc) // nothing to close: costs nothing
	}
	if s.linkLeft <= 0 {
		s.overrun(Links, s.blockStart)
		return nil // the `]` stays text; goldmark turns the open `[` back into text
	}
	s.openLabels--
	_, before := block.Position()
	n := g.InlineParser.Parse(parent, block, pc)
	if n != nil {
		_, after := block.Position()
		s.linkLeft -= after.Start - before.Start + 1
	} else {
		s.linkLeft -= s.blockSize
	}
	return n
}

// parseCodeSpan meters the code span parser. A backtick run that opens a
// code span is charged the bytes the span covers; one that finds no closing
// run has scanned the rest of its paragraph, and is charged that. Once the
// budget is spent, backtick runs are text.
func (g *inlineGate) parseCodeSpan(s *state, parent ast.Node, block text.Reader, pc parser.Context) ast.Node {
	line, seg := block.PeekLine()
	if s.codeSpanLeft <= 0 {
		s.overrun(CodeSpans, s.blockStart)
		run := 0
		for run < len(line) && line[run] == '`' {
			run++
		}
		block.Advance(run)
		return ast.NewTextSegment(seg.WithStop(seg.Start + run))
	}
	n := g.InlineParser.Parse(parent, block, pc)
	if _, ok := n.(*ast.CodeSpan); ok {
		_, after := block.Position()
		s.codeSpanLeft -= after.Start - seg.Start + 1
	} else {
		s.codeSpanLeft -= s.blockStart + s.blockSize - seg.Start + 1
	}
	return n
}

// delimiter meters one delimiter run. goldmark matches them when the block
// ends: each closer scans back through the delimiters still listed before it
// until it finds its opener, so a closer is charged the length that list may
// have. A closer that cannot open and has no opener of its kind before it
// leaves the list unmatched, so it is charged but does not lengthen the list
// (in `~a_`, say, without GFM, no `_` ever waits to be matched).
func (s *state) delimiter(d *parser.Delimiter) {
	if d.CanClose {
		if s.emphasisLeft < s.blockDelim {
			// goldmark's matching skips a delimiter that can neither open
			// nor close, and it ends up as text.
			s.emphasisLeft = 0
			d.CanOpen, d.CanClose = false, false
			s.overrun(Emphasis, s.blockStart)
		} else {
			s.emphasisLeft -= s.blockDelim
		}
	}
	if d.CanOpen || !d.CanClose || s.openers[d.Char] > 0 {
		s.blockDelim++
	}
	if d.CanOpen {
		if s.openers == nil {
			s.openers = map[byte]int{}
		}
		s.openers[d.Char]++
	}
}

// closingInlineGate is an inlineGate for a parser that also wants to hear
// when its block closes (the link parser does).
type closingInlineGate struct {
	inlineGate
	closer parser.CloseBlocker
}

func (g *closingInlineGate) CloseBlock(parent ast.Node, block text.Reader, pc parser.Context) {
	g.closer.CloseBlock(parent, block, pc)
}

// referenceGate meters the transformer that takes link reference
// definitions out of paragraphs. Refused, the paragraph stays a paragraph.
type referenceGate struct{ parser.ParagraphTransformer }

func (g *referenceGate) SetOption(name parser.OptionName, value any) {
	setOption(g.ParagraphTransformer, name, value)
}

func (g *referenceGate) Transform(node *ast.Paragraph, reader text.Reader, pc parser.Context) {
	lines := node.Lines()
	if lines.Len() == 0 {
		return
	}
	// A paragraph that does not start with `[` holds no definitions, and
	// goldmark gives up on it at once.
	first := lines.At(0)
	if v := util.TrimLeftSpace(first.Value(reader.Source())); len(v) > 0 && v[0] == '[' {
		s := stateOf(pc)
		cost := lines.Len() * lines.Len()
		if s.referenceLeft < cost {
			s.referenceLeft = 0
			s.overrun(References, first.Start)
			return
		}
		s.referenceLeft -= cost
	}
	g.ParagraphTransformer.Transform(node, reader, pc)
}
