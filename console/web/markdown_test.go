package web

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/workflow/mdlimit"
)

// renderBound is what rendering a memo at the 1 MiB body limit may cost
// (scaled under -race). The capped renderer takes under 0.5 s on any shape
// below (UnmatchedEmphasis, the slowest, 0.4–0.5 s; 3.4–4.4 s with -race,
// which is why the bound is scaled there: unscaled, a loaded CI machine
// failed it); before, they took from seconds (25 s for DeepIndentation
// with -race) to well over minutes, on every page showing the memo.
const renderBound = 5 * time.Second * raceSlowdown

const maxBody = 1 << 20 // SPEC §7

func repeatTo(unit string, n int) string { return strings.Repeat(unit, n/len(unit)) }

func linesTo(n int, line func(i int) string) string {
	var b strings.Builder
	for i := 0; ; i++ {
		l := line(i)
		if b.Len()+len(l) > n {
			return b.String()
		}
		b.WriteString(l)
	}
}

// The shapes goldmark parses in superlinear time (measured; see package
// mdlimit), each ending in text that must still be shown.
var pathologicalBodies = []struct {
	name string
	body string
	tail string // text that must survive into the HTML
}{
	{"NestedBlockQuotes", repeatTo(">", maxBody-3) + " hi", "hi"},
	{"NestedBlockQuotesSpaced", repeatTo("> ", maxBody-2) + "hi", "hi"},
	{"NestedBulletLists", repeatTo("- ", maxBody-2) + "hi", "hi"},
	{"NestedOrderedLists", repeatTo("1. ", maxBody-2) + "hi", "hi"},
	{"QuotesAndLists", repeatTo("> - ", maxBody-2) + "hi", "hi"},
	{"DeepIndentation", linesTo(maxBody-3, func(i int) string { return strings.Repeat("  ", i) + "- a\n" }) + "hi", "hi"},
	{"UnmatchedEmphasis", repeatTo("*a_", maxBody-3) + " hi", "hi"},
	{"MixedEmphasis", repeatTo("*a_b*c_d**e_f*g**h*i_j**", maxBody-3) + " hi", "hi"},
	{"UnmatchedStrikethrough", repeatTo("~a_", maxBody-3) + " hi", "hi"},
	{"UnclosedLinkDestinations", repeatTo("[a](", maxBody-3) + " hi", "hi"},
	{"UnclosedImageDestinations", repeatTo("![a](", maxBody-3) + " hi", "hi"},
	{"UnclosedLinkTitles", repeatTo("[a](b \"\n", maxBody-3) + " hi", "hi"},
	{"NestedLinkBrackets", strings.Repeat("[", maxBody/2-2) + "a" + strings.Repeat("]", maxBody/2-2) + " hi", "hi"},
	{"UnclosedCodeSpans", linesTo(maxBody-3, func(i int) string { return "a" + strings.Repeat("`", i+1) + "\n" }) + "hi", "hi"},
	{"ReferenceDefinitions", linesTo(maxBody-3, func(i int) string { return fmt.Sprintf("[r%d]: /u\n", i) }) + "hi", "hi"},
}

func TestRenderPathologicalMemoIsBounded(t *testing.T) {
	for _, p := range pathologicalBodies {
		t.Run(p.name, func(t *testing.T) {
			require.LessOrEqual(t, len(p.body), maxBody)
			done := make(chan string, 1)
			start := time.Now()
			go func() { done <- renderMarkdown(p.body) }()
			var out string
			select {
			case out = <-done:
			case <-time.After(renderBound):
				t.Fatalf("still rendering after %v", renderBound)
			}
			t.Logf("%d bytes rendered in %v", len(p.body), time.Since(start))
			require.Contains(t, out, p.tail)
			require.LessOrEqual(t, strings.Count(out, "<blockquote>"), mdlimit.MaxNesting)
			require.LessOrEqual(t, strings.Count(out, "<li>"), 2*mdlimit.MaxNesting) // the deepest item holds one more list
			require.NotContains(t, out, "<pre>"+p.body[:10], "rendered, not given up on")
		})
	}
}

// Rendering through the metered parser is the rendering of before: GFM,
// escaped raw HTML, and nesting up to the cap.
func TestRenderMarkdownOrdinary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"# Title\n\n*em* **strong** ~~gone~~ `code`", "<h1>Title</h1>\n<p><em>em</em> <strong>strong</strong> <del>gone</del> <code>code</code></p>\n"},
		{"[a](https://example.com) [b][r] https://example.org\n\n[r]: /ref", `<p><a href="https://example.com">a</a> <a href="/ref">b</a> <a href="https://example.org">https://example.org</a></p>` + "\n"},
		{"| a | b |\n|---|---|\n| 1 | 2 |", "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n<td>2</td>\n</tr>\n</tbody>\n</table>\n"},
		{"- [x] done\n- [ ] todo", "<ul>\n<li><input checked=\"\" disabled=\"\" type=\"checkbox\"> done</li>\n<li><input disabled=\"\" type=\"checkbox\"> todo</li>\n</ul>\n"},
		{"<script>alert(1)</script>", "<pre class=\"raw-html\">&lt;script&gt;alert(1)&lt;/script&gt;</pre>\n"},
		{"x <b>y</b>", "<p>x &lt;b&gt;y&lt;/b&gt;</p>\n"},
		{"[x](javascript:alert(1))", "<p><a href=\"\">x</a></p>\n"},
	} {
		require.Equal(t, tc.want, renderMarkdown(tc.in), tc.in)
	}

	deep := renderMarkdown(strings.Repeat("> ", mdlimit.MaxNesting) + "quoted")
	require.Equal(t, mdlimit.MaxNesting, strings.Count(deep, "<blockquote>"))
	deeper := renderMarkdown(strings.Repeat("> ", mdlimit.MaxNesting+2) + "quoted")
	require.Equal(t, mdlimit.MaxNesting, strings.Count(deeper, "<blockquote>"))
	require.Contains(t, deeper, "<p>&gt; &gt; quoted</p>", "markers past the cap are shown as text")
}
