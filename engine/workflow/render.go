package workflow

import (
	"fmt"
	"strings"
	"text/template"
)

// noValue is what text/template prints for a missing map key even under
// missingkey=zero (the zero of `any` is nil, printed as "<no value>").
const noValue = "<no value>"

// Render executes the step's prompt. Missing payload keys render as empty
// rather than failing the run, because payloads come from chat messages and
// API callers and an optional field is normal; the "<no value>" marker
// text/template still prints for them is removed for the same reason.
func (s Step) Render(data any) (string, error) {
	t, err := template.New("prompt").Option("missingkey=zero").Parse(s.Prompt)
	if err != nil {
		return "", fmt.Errorf("step at line %d: prompt template does not parse: %w", s.Line, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("step at line %d: rendering prompt: %w", s.Line, err)
	}
	return strings.ReplaceAll(b.String(), noValue, ""), nil
}
