package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	t.Parallel()
	wf := &Manifest{Title: "WF", Command: "/wf"}
	data := PromptData{
		Payload:  map[string]any{"title": "T", "brief": "B", "source": map[string]any{"memoId": "m1"}},
		Context:  []ContextMemo{{Class: "gate", Title: "Style guide", Body: "Be brief."}, {Class: "search", Title: "Hit"}},
		Session:  map[string]any{"tag": "s-1"},
		Workflow: wf,
	}
	cases := []struct {
		name, prompt, want, err string
		data                    any
	}{
		{"payload", "# {{.Payload.title}}\n\n{{.Payload.brief}}", "# T\n\nB", "", data},
		{"nested payload", "{{.Payload.source.memoId}}", "m1", "", data},
		{"missing key is empty", "[{{.Payload.nope}}]", "[]", "", data},
		{"missing nested key is empty", "[{{.Payload.source.nope}}]", "[]", "", data},
		{"nil payload", "[{{.Payload.title}}]", "[]", "", PromptData{}},
		{"context titles", "{{range .Context}}{{.Class}}:{{.Title}};{{end}}", "gate:Style guide;search:Hit;", "", data},
		{"session and workflow", "{{.Session.tag}} {{.Workflow.Command}}", "s-1 /wf", "", data},
		{"pointer data", "{{.Payload.title}}", "T", "", &data},
		{"empty prompt", "", "", "", data},
		{"parse error", "{{.Payload.title", "", "does not parse", data},
		{"exec error", "{{.Nope}}", "", "rendering prompt", data},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := Step{Kind: KindProcess, Prompt: tc.prompt, Line: 7}.Render(tc.data)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorContains(t, err, "line 7")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}
