package workflow

import (
	"embed"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/yuin/goldmark/ast"
)

// Examples holds the example workflows (examples/*.md) and the context memos
// they load (examples/context/*.md). They ship in the binary so that a fresh
// install can seed a library whose workflows compile and run out of the box.
//
//go:embed examples
var Examples embed.FS

// ExampleMemo is one embedded example, shaped the way the store wants it.
type ExampleMemo struct {
	Title    string
	Body     string
	MemoType string // "workflow" or "note"
}

// ExampleMemos lists every embedded example, context memos first: workflows
// name their Gate and Hook memos, which must exist before the workflows can
// compile against the library.
func ExampleMemos() ([]ExampleMemo, error) {
	var out []ExampleMemo
	for _, g := range []struct{ dir, memoType string }{
		{"examples/context", "note"},
		{"examples", "workflow"},
	} {
		entries, err := fs.ReadDir(Examples, g.dir)
		if err != nil {
			return nil, err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
				continue
			}
			b, err := fs.ReadFile(Examples, path.Join(g.dir, e.Name()))
			if err != nil {
				return nil, err
			}
			title := FirstHeading(b)
			if title == "" {
				title = strings.TrimSuffix(e.Name(), ".md")
			}
			out = append(out, ExampleMemo{Title: title, Body: string(b), MemoType: g.memoType})
		}
	}
	return out, nil
}

// FirstHeading returns the text of the first level-1 heading, or "". It is
// the one rule for "a memo's title is its first # heading", shared by the
// compiler, the examples and dispatch, so they cannot disagree.
func FirstHeading(md []byte) string {
	md = normalizeCR(md)
	doc, _ := parseMarkdown(md)
	c := &compiler{src: md}
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		if h, ok := n.(*ast.Heading); ok && h.Level == 1 {
			return c.inlineText(h)
		}
	}
	return ""
}

// PlainText is md's prose without its markup (headings, paragraphs and list
// items, joined by single spaces; code blocks and tables left out): what an
// excerpt of a memo shows.
func PlainText(md []byte) string {
	md = normalizeCR(md)
	doc, _ := parseMarkdown(md)
	c := &compiler{src: md}
	var parts []string
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n.Kind() {
		case ast.KindParagraph, ast.KindHeading, ast.KindTextBlock:
			if t := c.inlineText(n); t != "" {
				parts = append(parts, t)
			}
			return ast.WalkSkipChildren, nil
		case ast.KindFencedCodeBlock, ast.KindCodeBlock, ast.KindHTMLBlock:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}
