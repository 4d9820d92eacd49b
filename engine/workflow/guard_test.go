package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGuardCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		g      *GuardSpec
		output string
		want   []GuardOutcome
	}{
		{"nil passes content", nil, "x", []GuardOutcome{{"not_empty", true, "output has content"}}},
		{"nil fails blank", nil, " \n\t", []GuardOutcome{{"not_empty", false, "output is empty"}}},
		{"empty spec is not_empty", &GuardSpec{}, "", []GuardOutcome{{"not_empty", false, "output is empty"}}},
		{"chars count runes", &GuardSpec{MinChars: 3, MaxChars: 3}, "héé", []GuardOutcome{
			{"min_chars", true, "3 characters, need at least 3"},
			{"max_chars", true, "3 characters, allowed at most 3"},
		}},
		{"chars out of range", &GuardSpec{MinChars: 5, MaxChars: 1}, "abc", []GuardOutcome{
			{"min_chars", false, "3 characters, need at least 5"},
			{"max_chars", false, "3 characters, allowed at most 1"},
		}},
		{"words", &GuardSpec{MinWords: 2, MaxWords: 3}, "one two\nthree four", []GuardOutcome{
			{"min_words", true, "4 words, need at least 2"},
			{"max_words", false, "4 words, allowed at most 3"},
		}},
		{"contains", &GuardSpec{Contains: []string{"# T", "zzz"}, NotContains: []string{"TODO", "x"}}, "# Title x", []GuardOutcome{
			{"contains", true, `output contains "# T"`},
			{"contains", false, `output does not contain "zzz"`},
			{"not_contains", true, `output does not contain "TODO"`},
			{"not_contains", false, `output contains "x"`},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.g.Check(tc.output)
			require.Equal(t, tc.want, got)
			all := true
			for _, o := range tc.want {
				all = all && o.Passed
			}
			require.Equal(t, all, Passed(got))
		})
	}
}
