package mrkdwn

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEmphasis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"Bold", "this is *important* now", "this is **important** now"},
		{"BoldAtEnds", "*all of it*", "**all of it**"},
		{"BoldBeforePunctuation", "(*see*), *this*!", "(**see**), **this**!"},
		{"Strike", "~gone~ here", "~~gone~~ here"},
		{"Italic", "_as it was_", "_as it was_"},
		{"Nested", "_*both*_", "_**both**_"},
		{"TwoInARow", "*a* *b*", "**a** **b**"},
		{"InCode", "`*not bold*` and *bold*", "`*not bold*` and **bold**"},
		{"InBlock", "```\n*x*\n```\n*y*", "```\n*x*\n```\n**y**"},
		{"Arithmetic", "2*3*4", "2*3*4"},
		{"Bullet", "* item\n* other", "* item\n* other"},
		{"SpaceInside", "* not * bold", "* not * bold"},
		{"AcrossLines", "*one\ntwo*", "*one\ntwo*"},
		{"Unclosed", "*open and `code", "*open and `code"},
		{"Doubled", "**already**", "**already**"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Emphasis(tc.in))
		})
	}
}

// FuzzEmphasis: Emphasis only ever adds markers: without its stars and
// tildes the text is what it was, and code is never touched.
func FuzzEmphasis(f *testing.F) {
	for _, s := range []string{"*a*", "~b~ `*c*`", "```*d*```", "*e\nf*", "_*g*_", "2*3*4", "`", "```"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Emphasis(s)
		strip := strings.NewReplacer("*", "", "~", "")
		require.Equal(t, strip.Replace(s), strip.Replace(out))
		if !strings.ContainsAny(s, "*~") {
			require.Equal(t, s, out)
		}
	})
}
