package mrkdwn

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// linkRe matches one whole Slack link or mention as the renderer emits it:
// nothing inside may be '<' or '>' (labels are escaped, URLs percent-encoded).
var linkRe = regexp.MustCompile(`<[^<>\n]*>`)

// quotePrefix is what may stand before a blockquote's '>' on a line: list
// markers, indentation and outer quotes.
var quotePrefix = regexp.MustCompile(`^[ •0-9.>]*$`)

// brokenLink reports the first '<' or '>' of chunk that is not part of a
// whole <…> and not a blockquote marker, or "" when there is none.
func brokenLink(chunk string) string {
	for _, ln := range strings.Split(chunk, "\n") {
		rest := linkRe.ReplaceAllStringFunc(ln, func(m string) string { return strings.Repeat("x", len(m)) })
		if i := strings.IndexByte(rest, '<'); i >= 0 {
			return ln[i:]
		}
		for i := range len(rest) {
			if rest[i] == '>' && !quotePrefix.MatchString(rest[:i]) {
				return ln[i:]
			}
		}
	}
	return ""
}

// TestSplitKeepsSpansWhole is SPEC §5's split rule on paragraphs too long for
// one section: no cut inside a link or a code span, and a cut inside
// emphasis closes the span before it and reopens it after.
func TestSplitKeepsSpansWhole(t *testing.T) {
	t.Parallel()
	rep := func(n int, f string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, f, i)
		}
		return strings.TrimSpace(b.String())
	}
	cases := []struct {
		name string
		in   string
		// marker, when set, must wrap every section's text whole.
		marker string
	}{
		{"links", rep(100, "[read more here](https://example.com/page/%d) "), ""},
		{"links no spaces", rep(120, "[read more here](https://example.com/page/%d)"), ""},
		{"bare urls", rep(150, "https://example.com/a/%d?x=1&y=2 "), ""},
		{"code spans", rep(200, "`code span number %d` "), ""},
		{"bold", "**" + rep(400, "bold words %d ") + "**", "*"},
		{"italic", "_" + rep(400, "slanted words %d ") + "_", "_"},
		{"strike", "~~" + rep(400, "struck words %d ") + "~~", "~"},
		{"bold no spaces", "**" + strings.Repeat("x", 7000) + "**", "*"},
		{"bold links", "**" + rep(100, "[read more here](https://example.com/page/%d) ") + "**", "*"},
		{"heading", "# " + rep(400, "heading words %d "), "*"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			texts := checkLimits(t, Blocks([]byte(tc.in)))
			var secs []string
			for _, m := range texts {
				secs = append(secs, m...)
			}
			require.Greater(t, len(secs), 1, "the paragraph needs several sections")
			for i, s := range secs {
				require.Empty(t, brokenLink(s), "section %d cuts a link", i)
				require.Equal(t, 0, strings.Count(s, "`")%2, "section %d cuts a code span: %q", i, s)
				if tc.marker != "" {
					require.True(t, strings.HasPrefix(s, tc.marker) && strings.HasSuffix(s, tc.marker),
						"section %d is not wrapped in %s: %q … %q", i, tc.marker, s[:min(20, len(s))], s[max(0, len(s)-20):])
					inner := s[1 : len(s)-1]
					require.NotEqual(t, " ", inner[:1], "Slack ignores emphasis opened before a space")
					require.NotEqual(t, " ", inner[len(inner)-1:], "Slack ignores emphasis closed after a space")
				}
			}
			require.Equal(t, squash(strings.NewReplacer("*", "", "_", "", "~", "").Replace(Render([]byte(tc.in)))),
				squash(strings.NewReplacer("*", "", "_", "", "~", "").Replace(strings.Join(secs, ""))), "nothing lost or added but markers")
		})
	}
}
