package workflow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// compileBound is what a memo at the size limit may cost to compile
// (scaled under -race). The fixed compiler takes under 0.7 s on any shape
// below, and up to 3.4 s with -race on an idle machine, so unscaled a
// loaded CI machine could fail it. Before the fix they took from 1.1 s
// (DeepIndentation, n^1.5; 25 s with -race) through 7–25 s to well over
// minutes (goldmark's cost on them is quadratic or worse), and every run,
// restart and Gate edit paid it again.
const compileBound = 5 * time.Second * raceSlowdown

// pathological is one markdown shape that goldmark parses in superlinear
// time. Each was measured at 25–200 KB and 1 MB before it joined this table;
// shapes that only look alarming (a run of `[`, of `*`, deep `**` nesting,
// many list items, long lines of `>`) are linear and left out.
type pathological struct {
	name string
	// build returns the shape in at most n bytes.
	build func(n int) string
	// line is the shape's 0-based line that the error must name.
	line int
	// msg is a substring of that error.
	msg string
}

func repeatTo(unit string, n int) string { return strings.Repeat(unit, n/len(unit)) }

// linesTo repeats line(i) for i = 0, 1, … while the result fits in n bytes.
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

var pathologicalShapes = []pathological{
	// Block containers: goldmark recomputes the line's column from its start
	// for every container it opens or continues on a line, so one line of d
	// markers costs d² (200 KB of `>`: 16 s before the fix).
	{name: "NestedBlockQuotes", build: func(n int) string { return repeatTo(">", n-3) + " hi" }, msg: "nested more than 32 deep"},
	{name: "NestedBlockQuotesSpaced", build: func(n int) string { return repeatTo("> ", n-2) + "hi" }, msg: "nested more than 32 deep"},
	{name: "NestedBulletLists", build: func(n int) string { return repeatTo("- ", n-2) + "hi" }, msg: "nested more than 32 deep"},
	{name: "NestedStarLists", build: func(n int) string { return repeatTo("* ", n-2) + "hi" }, msg: "nested more than 32 deep"},
	{name: "NestedOrderedLists", build: func(n int) string { return repeatTo("1. ", n-2) + "hi" }, msg: "nested more than 32 deep"},
	{name: "QuotesAndLists", build: func(n int) string { return repeatTo("> - ", n-2) + "hi" }, msg: "nested more than 32 deep"},
	// One more level per line, by indentation: ~n^1.5 (1.3 s at 1 MB). The
	// 33rd line is the one that would open level 33.
	{name: "DeepIndentation", build: func(n int) string {
		return linesTo(n, func(i int) string { return strings.Repeat("  ", i) + "- a\n" })
	}, line: 32, msg: "nested more than 32 deep"},
	// Emphasis: goldmark's delimiter matching has no openers-bottom, so a
	// closer that matches nothing scans every earlier delimiter (100 KB of
	// `*a_`: 11 s; goldmark issue #555 is the mixed form).
	{name: "UnmatchedEmphasis", build: func(n int) string { return repeatTo("*a_", n) }, msg: "emphasis"},
	{name: "MixedEmphasis", build: func(n int) string { return repeatTo("*a_b*c_d**e_f*g**h*i_j**", n) }, msg: "emphasis"},
	// Links: every `]` of a failed link rescans the rest of its paragraph
	// (its destination, title or label), so failures are quadratic.
	{name: "UnclosedLinkDestinations", build: func(n int) string { return repeatTo("[a](", n) }, msg: "link brackets"},
	{name: "UnclosedImageDestinations", build: func(n int) string { return repeatTo("![a](", n) }, msg: "link brackets"},
	{name: "UnclosedLinkTitles", build: func(n int) string { return repeatTo("[a](b \"\n", n) }, msg: "link brackets"},
	{name: "NestedLinkBrackets", build: func(n int) string {
		return strings.Repeat("[", n/2-1) + "a" + strings.Repeat("]", n/2-1)
	}, msg: "link brackets"},
	// Code spans: a backtick run with no closing run of its length scans
	// the rest of its paragraph, once per length: n^1.5 (0.4 s at 1 MB).
	{name: "UnclosedCodeSpans", build: func(n int) string {
		return linesTo(n, func(i int) string { return "a" + strings.Repeat("`", i+1) + "\n" })
	}, msg: "code spans"},
	// Link reference definitions in one paragraph: each one found re-slices
	// the rest of the paragraph (6 s at 1 MB).
	{name: "ReferenceDefinitions", build: func(n int) string {
		return linesTo(n, func(i int) string { return fmt.Sprintf("[r%d]: /u\n", i) })
	}, msg: "reference definitions"},
}

// within runs f and fails the test when it takes longer than d, without
// waiting for it: before the fix some of these never finish in a test's life.
func within(t *testing.T, d time.Duration, f func()) time.Duration {
	t.Helper()
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		f()
		done <- time.Since(start)
	}()
	select {
	case took := <-done:
		return took
	case <-time.After(d):
		t.Fatalf("still running after %v", d)
		return 0
	}
}

// pathologicalMemo is a valid workflow memo whose Policy section ends with
// the shape, the whole just under the size limit, and the 1-based line the
// shape starts on.
func pathologicalMemo(p pathological) (string, int) {
	head := base().String() + "\n"
	return head + p.build(MaxSourceBytes-len(head)-1), strings.Count(head, "\n") + 1
}

func TestCompilePathologicalMemoIsBounded(t *testing.T) {
	for _, p := range pathologicalShapes {
		t.Run(p.name, func(t *testing.T) {
			src, start := pathologicalMemo(p)
			require.LessOrEqual(t, len(src), MaxSourceBytes)
			var (
				m    *Manifest
				errs Errors
			)
			took := within(t, compileBound, func() { m, errs = compile([]byte(src), Options{}) })
			t.Logf("%d bytes compiled in %v", len(src), took)
			require.Nil(t, m)
			require.NotEmpty(t, errs)
			want := start + p.line
			found := false
			for _, e := range errs {
				require.NotContains(t, e.Message, "internal compiler error")
				if e.Line == want && strings.Contains(e.Message, p.msg) {
					found = true
				}
			}
			require.True(t, found, "no error on line %d mentioning %q: %v", want, p.msg, errs)

			if p.name == "NestedBlockQuotes" {
				// CommandOf runs the same compiler, for every listing.
				within(t, compileBound, func() { require.Equal(t, "/t", CommandOf([]byte(src))) })
			}
		})
	}
}

// The same shapes well inside the limits compile as before: the limits are
// far from anything a workflow author writes.
func TestMarkdownLimitsLeaveOrdinaryMemosAlone(t *testing.T) {
	t.Parallel()
	m := base()
	m.policy += "\n" + strings.Repeat("> ", 32) + "deeply quoted, but within the limit\n"
	m.policy += "\n" + strings.Repeat("*emphasis* and [a link](https://example.com) ", 200) + "\n"
	m.policy += "\n[ref]: https://example.com\n[ref2]: https://example.com\n"
	expectOK(t, m.String(), Options{})
}

func TestBareCRLineEndings(t *testing.T) {
	t.Parallel()
	lf := base().String()
	want := expectOK(t, lf, Options{})
	for name, nl := range map[string]string{"CR": "\r", "CRLF": "\r\n"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := strings.ReplaceAll(lf, "\n", nl)
			got := expectOK(t, src, Options{})
			if nl == "\r\n" {
				// CRLF already compiled; its prompts keep their CRs, as
				// they always have.
				for i := range got.Steps {
					got.Steps[i].Prompt = strings.ReplaceAll(got.Steps[i].Prompt, "\r\n", "\n")
				}
			}
			require.Equal(t, want, got)
			require.Equal(t, "Test workflow", FirstHeading([]byte(src)))

			// Errors name the line as an editor numbers it.
			bad := base()
			bad.policy = with(bad.policy, "- **Approval** `maybe`")
			badLF := bad.String()
			badSrc := strings.ReplaceAll(badLF, "\n", nl)
			_, errs := Compile([]byte(badSrc), Options{})
			require.Len(t, errs, 1, "%v", errs)
			require.Equal(t, lineOf(t, badLF, "**Approval** `maybe`"), errs[0].Line)
		})
	}
	// A lone CR between lines ending in LF is a line ending too (CommonMark).
	mixed := strings.Replace(lf, "\n", "\r", 3)
	require.Equal(t, want, expectOK(t, mixed, Options{}))
}
