package workflow

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// GuardSpec is the parsed ```guard block. Zero means unset, which is why a
// guard cannot demand "at most 0 characters": that is what "not empty" in
// reverse would be, and no workflow wants it.
type GuardSpec struct {
	MinChars    int      `json:"minChars,omitempty"`
	MaxChars    int      `json:"maxChars,omitempty"`
	MinWords    int      `json:"minWords,omitempty"`
	MaxWords    int      `json:"maxWords,omitempty"`
	Contains    []string `json:"contains,omitempty"`
	NotContains []string `json:"notContains,omitempty"`
}

// GuardOutcome is recorded on the run for every check, passed or not, so a
// steward can see why a run was or was not stopped.
type GuardOutcome struct {
	Check  string `json:"check"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

// Check runs every configured check against output. A nil or empty spec
// still checks that the output is not blank: a Guard step that checked
// nothing would give false comfort. Characters are runes, not bytes, so
// limits mean what an author reading the text would count.
func (g *GuardSpec) Check(output string) []GuardOutcome {
	if g == nil || g.empty() {
		ok := strings.TrimSpace(output) != ""
		d := "output has content"
		if !ok {
			d = "output is empty"
		}
		return []GuardOutcome{{Check: "not_empty", Passed: ok, Detail: d}}
	}
	var out []GuardOutcome
	chars := utf8.RuneCountInString(output)
	words := len(strings.Fields(output))
	if g.MinChars > 0 {
		out = append(out, GuardOutcome{"min_chars", chars >= g.MinChars, fmt.Sprintf("%d characters, need at least %d", chars, g.MinChars)})
	}
	if g.MaxChars > 0 {
		out = append(out, GuardOutcome{"max_chars", chars <= g.MaxChars, fmt.Sprintf("%d characters, allowed at most %d", chars, g.MaxChars)})
	}
	if g.MinWords > 0 {
		out = append(out, GuardOutcome{"min_words", words >= g.MinWords, fmt.Sprintf("%d words, need at least %d", words, g.MinWords)})
	}
	if g.MaxWords > 0 {
		out = append(out, GuardOutcome{"max_words", words <= g.MaxWords, fmt.Sprintf("%d words, allowed at most %d", words, g.MaxWords)})
	}
	for _, s := range g.Contains {
		ok := strings.Contains(output, s)
		d := fmt.Sprintf("output contains %q", s)
		if !ok {
			d = fmt.Sprintf("output does not contain %q", s)
		}
		out = append(out, GuardOutcome{"contains", ok, d})
	}
	for _, s := range g.NotContains {
		ok := !strings.Contains(output, s)
		d := fmt.Sprintf("output does not contain %q", s)
		if !ok {
			d = fmt.Sprintf("output contains %q", s)
		}
		out = append(out, GuardOutcome{"not_contains", ok, d})
	}
	return out
}

func (g *GuardSpec) empty() bool {
	return g.MinChars == 0 && g.MaxChars == 0 && g.MinWords == 0 && g.MaxWords == 0 &&
		len(g.Contains) == 0 && len(g.NotContains) == 0
}

// Passed reports whether every outcome passed; a run fails its Guard step
// on the first false.
func Passed(outcomes []GuardOutcome) bool {
	for _, o := range outcomes {
		if !o.Passed {
			return false
		}
	}
	return true
}
