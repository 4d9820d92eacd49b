package mdlimit

import (
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
)

func parse(src string) (ast.Node, []Overrun) {
	pc := parser.NewContext()
	doc := NewParser().Parse(text.NewReader([]byte(src)), parser.WithContext(pc))
	return doc, Overruns(pc)
}

func TestOverruns(t *testing.T) {
	t.Parallel()
	intro := "intro\n\n"
	var indented string
	for i := range MaxNesting + 4 {
		indented += strings.Repeat("  ", i) + "- a\n"
	}
	var unclosedCode string
	for i := range 400 {
		unclosedCode += "a" + strings.Repeat("`", i+1) + "\n"
	}
	for _, tc := range []struct {
		name string
		src  string
		want []Overrun // Count 0: any count
	}{
		{"QuotesAtTheCap", strings.Repeat(">", MaxNesting) + " hi", nil},
		{"QuotesPastTheCap", strings.Repeat(">", MaxNesting+8) + " hi", []Overrun{{Kind: Nesting, Offset: MaxNesting, Count: 1}}},
		{"SpacedQuotesPastTheCap", intro + strings.Repeat("> ", MaxNesting+1) + "hi", []Overrun{{Kind: Nesting, Offset: len(intro) + 2*MaxNesting, Count: 1}}},
		{"ListsPastTheCap", strings.Repeat("- ", MaxNesting+3) + "hi", []Overrun{{Kind: Nesting, Offset: 2 * MaxNesting, Count: 1}}},
		{"QuotedListPastTheCap", strings.Repeat("> ", MaxNesting) + "- item", []Overrun{{Kind: Nesting, Offset: 2 * MaxNesting, Count: 1}}},
		// A line that opens nothing is not refused, even at the cap.
		{"TextAtTheCap", strings.Repeat("> ", MaxNesting) + "2024 was a year\n" + strings.Repeat("> ", MaxNesting) + "-dash", nil},
		// Line i opens level i+1; the marker of line 32 would open level 33.
		{"DeepIndentation", indented, []Overrun{{Kind: Nesting, Offset: len(strings.Join(strings.SplitAfter(indented, "\n")[:MaxNesting], "")) + 2*MaxNesting}}},
		{"SomeEmphasis", intro + strings.Repeat("*a_", 300), nil},
		{"TooMuchEmphasis", intro + strings.Repeat("*a_", 2000), []Overrun{{Kind: Emphasis, Offset: len(intro)}}},
		// Closers with nothing to match leave goldmark's list at once.
		{"UnmatchableClosers", intro + strings.Repeat("~a_", 20000), nil},
		{"SomeLinks", intro + strings.Repeat("[a](", 300), nil},
		{"TooManyLinks", intro + strings.Repeat("[a](", 1200), []Overrun{{Kind: Links, Offset: len(intro)}}},
		{"ClosingBracketsAloneCostNothing", intro + strings.Repeat("a] ", 50000), nil},
		{"ClosedCodeSpans", intro + strings.Repeat("`code` and ``more`` ", 50000), nil},
		{"UnclosedCodeSpans", intro + unclosedCode, []Overrun{{Kind: CodeSpans, Offset: len(intro)}}},
		{"SomeReferences", intro + strings.Repeat("[r]: /u\n", 1000), nil},
		{"TooManyReferences", intro + strings.Repeat("[r]: /u\n", 2100), []Overrun{{Kind: Links, Offset: len(intro)}, {Kind: References, Offset: len(intro), Count: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, got := parse(tc.src)
			require.Len(t, got, len(tc.want), "%v", got)
			for i, w := range tc.want {
				require.Equal(t, w.Kind, got[i].Kind, "%v", got)
				require.Equal(t, w.Offset, got[i].Offset, "%v", got)
				if w.Count == 0 {
					require.Positive(t, got[i].Count)
				} else {
					require.Equal(t, w.Count, got[i].Count)
				}
			}
		})
	}
}

// Past a limit nothing is dropped: the refused markup is text.
func TestOverrunKeepsText(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	md := goldmark.New(goldmark.WithParser(NewParser()))
	require.NoError(t, md.Convert([]byte(strings.Repeat("> ", MaxNesting+2)+"hi"), &b))
	require.Equal(t, strings.Repeat("<blockquote>\n", MaxNesting)+"<p>&gt; &gt; hi</p>\n"+strings.Repeat("</blockquote>\n", MaxNesting), b.String())
}

// snippets render identically with and without the meter: each construct it
// wraps, options that reach wrapped parsers, and the GFM extensions.
var snippets = []string{
	"# Title {#custom}\n\nSome *em*, **strong**, ***both***, _under_ and `code`.\n",
	"> quote\n> > nested\n>\n> - list in quote\n>   1. ordered\n",
	strings.Repeat("> ", MaxNesting) + "at the cap\n",
	"- a\n  - b\n    - c\n\n- loose\n\n1) one\n2) two\n",
	"[inline](/u \"title\") ![img](/i.png) [ref] [full][ref] [collapsed][]\n\n[ref]: /r 'T'\n[collapsed]: /c\n",
	"[not a link] [also](not a link\n\n*unclosed **mixed_ em* phasis__\n",
	"~~struck~~ ~one~ | a | b |\n\n| h | i |\n|---|:-:|\n| 1 | 2 |\n\n- [x] done\n- [ ] todo\n\nwww.example.com https://x.y/z\n",
	"<div>\nraw\n</div>\n\n<!-- c --> text <span>x</span>\n",
	"    indented code\n\n```go\nfenced\n```\n\nSetext\n===\n\n---\n",
}

func TestSameAsGoldmark(t *testing.T) {
	t.Parallel()
	for _, gfm := range []bool{false, true} {
		opts := []goldmark.Option{goldmark.WithParserOptions(parser.WithAutoHeadingID(), parser.WithAttribute())}
		if gfm {
			opts = append(opts, goldmark.WithExtensions(extension.GFM))
		}
		plain := goldmark.New(opts...)
		metered := goldmark.New(append([]goldmark.Option{goldmark.WithParser(NewParser())}, opts...)...)
		for _, s := range snippets {
			var want, got bytes.Buffer
			require.NoError(t, plain.Convert([]byte(s), &want))
			require.NoError(t, metered.Convert([]byte(s), &got))
			require.Equal(t, want.String(), got.String(), "gfm=%v\n%s", gfm, s)
		}
	}
	var b bytes.Buffer
	md := goldmark.New(goldmark.WithParser(NewParser(parser.WithAttribute())))
	require.NoError(t, md.Convert([]byte("# T {#custom}\n"), &b))
	require.Equal(t, "<h1 id=\"custom\">T</h1>\n", b.String(), "options given to NewParser reach goldmark's parsers")
}

// TestCommonMarkSpec renders the CommonMark spec examples that ship with
// goldmark's module both ways. It skips when the module's files are not on
// disk (a vendored or pruned build).
func TestCommonMarkSpec(t *testing.T) {
	t.Parallel()
	// The binary records where goldmark's sources were compiled from: the
	// module cache, or with -trimpath its module path and version.
	file, _ := runtime.FuncForPC(reflect.ValueOf(goldmark.New).Pointer()).FileLine(0)
	dir := filepath.Dir(file)
	if !filepath.IsAbs(dir) {
		cache := os.Getenv("GOMODCACHE")
		if cache == "" {
			cache = filepath.Join(build.Default.GOPATH, "pkg", "mod")
		}
		dir = filepath.Join(cache, dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, "_test", "spec.json"))
	if err != nil {
		t.Skipf("goldmark's spec examples are not on disk: %v", err)
	}
	var examples []struct {
		Markdown string `json:"markdown"`
		Example  int    `json:"example"`
	}
	require.NoError(t, json.Unmarshal(b, &examples))
	require.NotEmpty(t, examples)
	plain := goldmark.New(goldmark.WithExtensions(extension.GFM))
	metered := goldmark.New(goldmark.WithParser(NewParser()), goldmark.WithExtensions(extension.GFM))
	for _, e := range examples {
		var want, got bytes.Buffer
		require.NoError(t, plain.Convert([]byte(e.Markdown), &want))
		require.NoError(t, metered.Convert([]byte(e.Markdown), &got))
		require.Equal(t, want.String(), got.String(), "example %d", e.Example)
	}
}

// One parser serves concurrent parses: each keeps its meter in its own
// context.
func TestConcurrentParses(t *testing.T) {
	t.Parallel()
	p := NewParser()
	deep := []byte(strings.Repeat(">", 100) + " hi")
	plain := []byte("just text")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				src, want := plain, 0
				if i%2 == 0 {
					src, want = deep, 1
				}
				pc := parser.NewContext()
				p.Parse(text.NewReader(src), parser.WithContext(pc))
				if got := len(Overruns(pc)); got != want {
					t.Errorf("%d overruns, want %d", got, want)
				}
			}
		}()
	}
	wg.Wait()
}

func TestAddOptionsAfterParsePanics(t *testing.T) {
	t.Parallel()
	p := NewParser()
	p.Parse(text.NewReader([]byte("x")))
	require.Panics(t, func() { p.AddOptions(parser.WithAutoHeadingID()) })
	require.Nil(t, Overruns(parser.NewContext()))
}
