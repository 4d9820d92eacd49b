package mrkdwn

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"bold", "a **b** c", "a *b* c"},
		{"bold underscores", "__b__", "*b*"},
		{"italic", "a *i* c", "a _i_ c"},
		{"italic underscores", "_i_", "_i_"},
		{"bold italic", "***x***", "_*x*_"},
		{"nested bold dropped", "**a **b** c**", "*a b c*"},
		{"strikethrough", "~~gone~~", "~gone~"},
		{"link", "[text](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|text>"},
		{"link formatted label flattened", "[**bold** `c`](http://x.y)", "<http://x.y|bold c>"},
		{"link label equals url", "[https://x.y](https://x.y)", "<https://x.y>"},
		{"link pipe in url", "[t](https://x.y/a|b)", "<https://x.y/a%7Cb|t>"},
		{"link pipe in label", "[a | b](https://x.y)", "<https://x.y|a ∣ b>"},
		{"mailto link", "[mail](mailto:a@b.c)", "<mailto:a@b.c|mail>"},
		{"javascript link inert", "[click](javascript:alert(1))", "click"},
		{"javascript link keeps formatting", "[**click**](JavaScript:alert(1))", "*click*"},
		{"relative link inert", "[doc](/docs/x)", "doc"},
		{"autolink", "<https://example.com>", "<https://example.com>"},
		{"autolink email", "<a@b.co>", "<mailto:a@b.co|a@b.co>"},
		{"autolink other scheme inert", "<irc://x.y/z>", "irc://x.y/z"},
		{"bare url", "see https://x.y/z now", "see <https://x.y/z> now"},
		{"www url", "www.x.com", "<http://www.x.com|www.x.com>"},
		{"image", "![a chart](https://x.y/c.png)", "<https://x.y/c.png|a chart>"},
		{"image no alt", "![](https://x.y/c.png)", "<https://x.y/c.png>"},
		{"image unsafe", "![alt](data:image/png;base64,xx)", "alt"},
		{"bullets", "- a\n- b", "• a\n• b"},
		{"nested bullets", "- a\n  - b\n    - c\n- d", "• a\n    • b\n        • c\n• d"},
		{"loose list", "- a\n\n- b", "• a\n\n• b"},
		{"ordered", "1. a\n2. b", "1. a\n2. b"},
		{"ordered start", "7) a\n8) b", "7. a\n8. b"},
		{"ordered nested", "1. a\n   - b\n2. c", "1. a\n    • b\n2. c"},
		{"list item paragraphs", "- a\n\n  b\n- c", "• a\n\n    b\n\n• c"},
		{"blockquote", "> a\n> b\n>\n> c", "> a\n> b\n>\n> c"},
		{"blockquote lazy line", "> a\nb", "> a\n> b"},
		{"nested blockquote", "> a\n>> b", "> a\n>\n> > b"},
		{"quote with list", "> - a\n> - b", "> • a\n> • b"},
		{"code span", "use `x < y && z`", "use `x &lt; y &amp;&amp; z`"},
		{"fenced code", "```go\nif a < b {\n}\n```", "```\nif a &lt; b {\n}\n```"},
		{"indented code", "    x := 1\n    y", "```\nx := 1\ny\n```"},
		{"code in list", "- a\n\n  ```\n  x\n  ```", "• a\n\n    ```\n    x\n    ```"},
		{"heading", "# Title", "*Title*"},
		{"heading with emphasis", "## A **b** _c_", "*A b _c_*"},
		{"thematic break", "a\n\n---\n\nb", "a\n\n──────────\n\nb"},
		{"hard break", "a  \nb\\\nc", "a\nb\nc"},
		{"soft break", "a\nb", "a\nb"},
		{"typed bullets", "• a\n• b", "• a\n• b"},
		{"soft break trailing space", "a \nb", "a\nb"},
		{"emphasis across soft break", "**a\nb** _c\nd_", "*a*\n*b* _c_\n_d_"},
		{"list item soft break", "- a\nb\n- c", "• a\n    b\n• c"},
		{"setext heading soft break", "a\nb\n===", "*a*\n*b*"},
		{"link label soft break", "[a\nb](https://x.y)", "<https://x.y|a b>"},
		{"code span soft break", "`a\nb`", "`a b`"},
		{"emphasis across hard break", "**a  \nb**", "*a*\n*b*"},
		{"raw inline html", "a <b>x</b>", "a &lt;b&gt;x&lt;/b&gt;"},
		{"raw html block", "<div>\n<script>alert(1)</script>\n</div>", "&lt;div&gt;\n&lt;script&gt;alert(1)&lt;/script&gt;\n&lt;/div&gt;"},
		{"table", "| a | bb |\n|---|---|\n| 1 | 22 |\n| 333 | |", "```\na   | bb\n----+---\n1   | 22\n333 |\n```"},
		{"escaping", "a & b < c > d", "a &amp; b &lt; c &gt; d"},
		{"entities decoded then escaped", "&copy; &amp; &lt;x&gt; &#35;", "© &amp; &lt;x&gt; #"},
		{"slack syntax inert", "<!channel> <@U123>", "&lt;!channel&gt; &lt;@U123&gt;"},
		{"backslash escapes", `\*a\* \[b\]`, "*a* [b]"},
		{"empty", "", ""},
		{"paragraphs", "a\n\n\nb", "a\n\nb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Render([]byte(tc.in)))
		})
	}
}

func TestFallback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"plain", "# Memo\n\n**Hi** [there](https://x.y)\n\n- a\n- b", 100, "Memo Hi there a b"},
		{"escaped", "a < b & c", 100, "a &lt; b &amp; c"},
		{"truncated", "one two three four", 10, "one two…"},
		{"no entity cut", "aaaaaa &&", 9, "aaaaaa…"},
		{"zero", "abc", 0, ""},
		{"code", "```\nx\n```", 10, "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Fallback([]byte(tc.in), tc.n)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, utf8.RuneCountInString(got), max(tc.n, 0))
		})
	}
}

func sectionTexts(t *testing.T, msgs [][]slack.Block) [][]string {
	t.Helper()
	out := make([][]string, len(msgs))
	for i, m := range msgs {
		for _, b := range m {
			s, ok := b.(*slack.SectionBlock)
			require.True(t, ok)
			require.Equal(t, slack.MarkdownType, s.Text.Type)
			out[i] = append(out[i], s.Text.Text)
		}
	}
	return out
}

// checkLimits asserts every Slack limit Blocks promises.
func checkLimits(t *testing.T, msgs [][]slack.Block) [][]string {
	t.Helper()
	texts := sectionTexts(t, msgs)
	for _, m := range texts {
		require.NotEmpty(t, m)
		require.LessOrEqual(t, len(m), MaxBlocks)
		total := 0
		for _, s := range m {
			require.NotEmpty(t, strings.TrimSpace(s))
			require.LessOrEqual(t, charLen(s), MaxSectionChars)
			require.LessOrEqual(t, utf8.RuneCountInString(s), MaxSectionChars)
			total += charLen(s)
		}
		require.LessOrEqual(t, total, MaxMessageChars)
	}
	return texts
}

func squash(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "```", "")), "")
}

func rejoin(texts [][]string) string {
	var parts []string
	for _, m := range texts {
		parts = append(parts, m...)
	}
	return strings.Join(parts, "")
}

func TestBlocksSplitting(t *testing.T) {
	t.Parallel()
	word := "lorem ipsum dolor & sit <amet> "
	long := strings.Repeat(word, 10000/len(word)+1)
	cases := []struct {
		name     string
		in       string
		sections int // minimum expected
		messages int // minimum expected
	}{
		{"short", "hello", 1, 1},
		{"10k single paragraph", long, 4, 1},
		{"10k many lines", strings.Repeat("line of text & more\n", 10000/20) + "", 1, 1},
		{"10k no spaces", strings.Repeat("x&", 5000), 4, 1},
		{"10k code block", "```\n" + strings.Repeat("code <here> & there\n", 500) + "```", 4, 1},
		{"120 paragraphs", strings.Repeat(strings.Repeat("w", 500)+"\n\n", 120), 20, 2},
		{"multibyte", strings.Repeat("héllo wörld 日本語 🎉 ", 1000), 4, 1},
		{"multibyte no spaces", strings.Repeat("日本語🎉", 3000), 5, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msgs := Blocks([]byte(tc.in))
			texts := checkLimits(t, msgs)
			require.GreaterOrEqual(t, len(msgs), tc.messages)
			n := 0
			for _, m := range texts {
				n += len(m)
				for _, s := range m {
					require.True(t, utf8.ValidString(s))
					require.False(t, strings.HasSuffix(s, "&") || strings.HasSuffix(s, "&amp") || strings.HasSuffix(s, "&lt") || strings.HasSuffix(s, "&g"), "cut inside entity: %q", s[max(0, len(s)-8):])
				}
			}
			require.GreaterOrEqual(t, n, tc.sections)
			require.Equal(t, squash(Render([]byte(tc.in))), squash(rejoin(texts)))
		})
	}
}

func TestCodeBlockSplitReopens(t *testing.T) {
	t.Parallel()
	msgs := Blocks([]byte("> ```\n" + strings.Repeat("> some code line\n", 400) + "> ```"))
	texts := checkLimits(t, msgs)
	secs := texts[0]
	require.Greater(t, len(secs), 1)
	for _, s := range secs {
		require.Equal(t, 2, strings.Count(s, "```"), "each section has a balanced fence")
		require.True(t, strings.HasPrefix(s, "> ```\n"))
		require.True(t, strings.HasSuffix(s, "\n> ```"))
	}
}

func TestSplitLimits(t *testing.T) {
	t.Parallel()
	// Small limits exercise the block-count ceiling, which real sizes
	// rarely reach because sections are packed.
	var blocks [][]line
	for i := range 30 {
		blocks = append(blocks, []line{{text: fmt.Sprintf("p%02d", i)}})
	}
	secs := sections(blocks, 4)
	require.Len(t, secs, 30)
	msgs := pack(secs, 7, 1000)
	require.Len(t, msgs, 5)
	for _, m := range msgs {
		require.LessOrEqual(t, len(m), 7)
	}
	msgs = pack(secs, 50, 12)
	require.Len(t, msgs, 8)
}

func TestCutLine(t *testing.T) {
	t.Parallel()
	bold := func(s string) string { return string(markOpen) + "*" + s + string(markClose) + "*" }
	cases := []struct {
		s          string
		max        int
		head, tail string
	}{
		{"abcdef", 3, "abc", "def"},
		{"ab&amp;cd", 4, "ab", "&amp;cd"},
		{"ab&amp;cd", 7, "ab&amp;", "cd"},
		{"ab&lt;", 5, "ab", "&lt;"},
		{"日本語", 2, "日本", "語"},
		{"🎉🎉", 3, "🎉", "🎉"},
		{"aaaa bbbb", 7, "aaaa", "bbbb"},
		{"a " + atom("<https://x.y|link text>") + " b", 10, "a", atom("<https://x.y|link text>") + " b"},
		{bold("aa bb cc"), 8, bold("aa bb"), bold("cc")},
		{"x " + bold("aa"), 3, "x", bold("aa")},
		{bold("aa") + " y", 4, bold("aa"), "y"},
	}
	for _, tc := range cases {
		head, tail, ok := cutLine(tc.s, tc.max)
		require.True(t, ok, "%q %d", tc.s, tc.max)
		require.Equal(t, []string{tc.head, tc.tail}, []string{head, tail}, "%q %d", tc.s, tc.max)
		require.LessOrEqual(t, charLen(head), tc.max)
	}
	_, _, ok := cutLine(atom("<https://x.y|link text>")+" b", 10)
	require.False(t, ok, "an atom longer than the room is not cut")
	_, _, ok = cutLine("abc", 0)
	require.False(t, ok)
}

func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"# h\n\n**b** _i_ ~~s~~ [l](https://x) ![i](http://y) <https://z> `c`\n\n- a\n  1. b\n\n> q\n\n```\nx\n```\n\n| a | b |\n|-|-|\n| 1 | 2 |",
		strings.Repeat("> ```\n> code & <x>\n", 8),
		strings.Repeat("日本🎉&", 20),
		"[x](javascript:alert(1)) <div>raw</div>",
		"- a\n\n  ```\n  long code line & more code\n  ```\n- b",
	} {
		f.Add([]byte(s))
	}
	// Real limits are only reached by large inputs, which fuzz slowly, so
	// the splitter is also run with a small section limit.
	const small = 48
	f.Fuzz(func(t *testing.T, in []byte) {
		out := Render(in)
		if utf8.Valid(in) {
			require.True(t, utf8.ValidString(out))
		}
		require.NotContains(t, out, string(atomStart), "sentinels never reach Slack")
		fb := Fallback(in, 150)
		require.LessOrEqual(t, utf8.RuneCountInString(fb), 150)
		checkLimits(t, Blocks(in))
		checkSplit(t, in, small)
	})
}

// FuzzSplit checks SPEC §5's split rule at section limits the fuzzer picks:
// every chunk is within the limit, no chunk holds a broken <…>, a cut entity
// or unbalanced emphasis, and the chunks hold the whole rendering.
func FuzzSplit(f *testing.F) {
	var links, bold strings.Builder
	for i := range 30 {
		fmt.Fprintf(&links, "[read more here](https://example.com/page/%d) ", i)
		fmt.Fprintf(&bold, "word%d ", i)
	}
	for _, s := range []string{
		links.String(),
		"**" + strings.TrimSpace(bold.String()) + "** and _" + strings.TrimSpace(bold.String()) + "_",
		"***" + strings.TrimSpace(bold.String()) + "***",
		"# " + bold.String(),
		"~~**[l](https://x.y/" + strings.Repeat("a", 80) + ")**~~ `" + strings.Repeat("code ", 30) + "`",
		"> " + links.String() + "\n> " + bold.String(),
		"- **" + strings.TrimSpace(bold.String()) + "**\n  - `x & y` " + links.String(),
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, lim uint8) {
		checkSplit(t, in, 40+int(lim))
	})
}

// canonical is rendered text reduced to what a split must keep: links as
// label then URL (the order an over-long link is shown in as plain text),
// no markup characters (cuts add emphasis markers), no whitespace.
func canonical(s string) string {
	s = linkRe.ReplaceAllStringFunc(s, func(m string) string {
		url, label, ok := strings.Cut(m[1:len(m)-1], "|")
		if !ok {
			return url
		}
		return label + url
	})
	return strings.Join(strings.Fields(strings.NewReplacer("`", "", ">", "", "<", "", "*", "", "_", "", "~", "", "(", "", ")", "", "|", "").Replace(s)), "")
}

// checkSplit splits in at limit and checks every chunk (SPEC §5).
func checkSplit(t *testing.T, in []byte, limit int) {
	t.Helper()
	var joined strings.Builder
	for i, s := range sections(renderBlocks(in), limit) {
		require.LessOrEqual(t, charLen(s), limit, "chunk %d over the limit: %q", i, s)
		checkSpans(t, s)
		plain := strip(s)
		require.True(t, utf8.ValidString(plain) || !utf8.Valid(in))
		require.Empty(t, brokenLink(plain), "chunk %d cuts a link: %q", i, plain)
		for rest := plain; strings.Contains(rest, "&"); rest = rest[1:] {
			rest = rest[strings.IndexByte(rest, '&'):]
			require.True(t, strings.HasPrefix(rest, "&amp;") || strings.HasPrefix(rest, "&lt;") || strings.HasPrefix(rest, "&gt;"),
				"chunk %d cuts an entity: %q", i, rest[:min(len(rest), 6)])
		}
		joined.WriteString(canonical(plain))
	}
	require.Equal(t, canonical(Render(in)), joined.String(), "the chunks hold the whole rendering")
}

// checkSpans asserts a chunk's structure as the renderer marked it: atoms
// whole, emphasis balanced within each line, and every emphasis span
// non-empty with its markers touching text (else Slack shows them
// literally). Backtick spans (over-long code spans cut in pieces) may hold
// spaces at their ends, as code spans may.
func checkSpans(t *testing.T, chunk string) {
	t.Helper()
	for _, ln := range strings.Split(chunk, "\n") {
		toks := tokenize(ln)
		var stack []string
		for k, tk := range toks {
			switch tk.kind {
			case tokAtom:
				if strings.HasPrefix(tk.s, string(atomStart)) {
					require.True(t, strings.HasSuffix(tk.s, string(atomEnd)), "atom cut: %q", ln)
				}
			case tokOpen:
				stack = append(stack, tk.marker())
				require.Less(t, k+1, len(toks), "span opened at the end: %q", ln)
				next := toks[k+1]
				require.NotEqual(t, tokClose, next.kind, "empty span: %q", ln)
				if tk.marker() != "`" {
					require.NotEqual(t, tokSpace, next.kind, "span opened before a space: %q", ln)
				}
			case tokClose:
				require.NotEmpty(t, stack, "span closed but not open: %q", ln)
				require.Equal(t, stack[len(stack)-1], tk.marker(), "spans closed out of order: %q", ln)
				stack = stack[:len(stack)-1]
				prev := toks[k-1]
				require.NotEqual(t, tokOpen, prev.kind, "empty span: %q", ln)
				if tk.marker() != "`" {
					require.NotEqual(t, tokSpace, prev.kind, "span closed after a space: %q", ln)
				}
			}
		}
		require.Empty(t, stack, "span left open at the end of a line: %q", ln)
	}
}

func BenchmarkRender(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("# Weekly memo\n\n")
	for sb.Len() < 5000 {
		sb.WriteString("## Section\n\nThe **pipeline** ran _twice_ with ~~three~~ two failures; see [the run](https://example.com/runs/42?x=1&y=2) and `make test`.\n\n")
		sb.WriteString("- first item with <angle> & ampersand\n- second item\n  1. nested one\n  2. nested two\n\n> quoted note\n> continues here\n\n")
		sb.WriteString("```go\nfunc main() { fmt.Println(\"a < b\") }\n```\n\n| k | v |\n|---|---|\n| a | 1 |\n\n")
	}
	md := []byte(sb.String())
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Render(md)
	}
}
