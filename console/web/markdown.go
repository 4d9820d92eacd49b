package web

import (
	"bytes"
	"html"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"

	"github.com/holdfast-bot/holdfast/engine/workflow/mdlimit"
)

// md renders memo markdown for the console. Raw HTML is shown as text, not
// dropped and never executed (SPEC §6), and goldmark's safe mode (no
// WithUnsafe) already empties javascript:/vbscript:/data: link targets.
//
// Its parser is goldmark's with the constructs goldmark parses in
// superlinear time metered (package mdlimit): block quotes and lists nested
// more than mdlimit.MaxNesting deep, and unmatched emphasis, link brackets,
// code spans or reference definitions past a budget proportional to the
// memo, are rendered as the literal text they are written as. Unmetered, one
// 1 MiB memo of nested `>` held a request for minutes, and every page showing
// it (memo, hold, session) paid it again. Capping keeps every word visible and
// the rest of the memo formatted, which escaping the whole body as
// preformatted text would not; a memo anywhere near the caps is not prose
// anyone formats by hand, so nothing legible is lost.
var md = goldmark.New(
	goldmark.WithParser(mdlimit.NewParser()),
	goldmark.WithExtensions(extension.GFM),
	goldmark.WithRendererOptions(
		renderer.WithNodeRenderers(util.Prioritized(escapedHTML{}, 100)),
	),
)

// escapedHTML renders raw HTML nodes (inline and block) as escaped text.
type escapedHTML struct{}

func (escapedHTML) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindRawHTML, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			segs := n.(*ast.RawHTML).Segments
			for i := 0; i < segs.Len(); i++ {
				s := segs.At(i)
				_, _ = w.WriteString(html.EscapeString(string(s.Value(src))))
			}
		}
		return ast.WalkSkipChildren, nil
	})
	reg.Register(ast.KindHTMLBlock, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		b := n.(*ast.HTMLBlock)
		_, _ = w.WriteString("<pre class=\"raw-html\">")
		for i := 0; i < b.Lines().Len(); i++ {
			l := b.Lines().At(i)
			_, _ = w.WriteString(html.EscapeString(string(l.Value(src))))
		}
		if b.HasClosure() {
			_, _ = w.WriteString(html.EscapeString(string(b.ClosureLine.Value(src))))
		}
		_, _ = w.WriteString("</pre>\n")
		return ast.WalkSkipChildren, nil
	})
}

// renderMarkdown returns safe HTML for src; a render error (which goldmark
// only returns on a failed write to a buffer) falls back to escaped text.
func renderMarkdown(src string) string {
	var buf bytes.Buffer
	if err := md.Convert([]byte(src), &buf); err != nil {
		return "<pre>" + html.EscapeString(src) + "</pre>"
	}
	return buf.String()
}
