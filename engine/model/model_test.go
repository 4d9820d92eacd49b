package model

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTemplateComplete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		msgs     []Message
		want     string
		in, out  int
		wantErrs bool
	}{
		{
			name: "single user message",
			msgs: []Message{{Role: RoleUser, Content: "Draft a memo about  tides"}},
			want: "Draft a memo about  tides", in: 5, out: 5,
		},
		{
			name: "last user message wins, all messages counted",
			msgs: []Message{
				{Role: RoleSystem, Content: "You are terse."},
				{Role: RoleUser, Content: "first ask"},
				{Role: RoleAssistant, Content: "an answer here"},
				{Role: RoleUser, Content: "second\nask\tnow"},
				{Role: RoleTool, Content: "tool result", ToolCallID: "c1"},
			},
			want: "second\nask\tnow", in: 3 + 2 + 3 + 3 + 2, out: 3,
		},
		{
			name: "empty user content is returned verbatim",
			msgs: []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser}},
			want: "", in: 1, out: 0,
		},
		{
			name:     "no user message is an error",
			msgs:     []Message{{Role: RoleSystem, Content: "sys"}},
			wantErrs: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := New("template", "", Config{})
			require.NoError(t, err)
			require.Equal(t, "template", m.Name())
			tools := []Tool{{Name: "list_workflows"}}
			resp, err := m.Complete(context.Background(), Request{Messages: tc.msgs, Tools: tools})
			if tc.wantErrs {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, resp.Content)
			require.Equal(t, tc.in, resp.TokensIn)
			require.Equal(t, tc.out, resp.TokensOut)
			require.Empty(t, resp.ToolCalls)

			again, err := m.Complete(context.Background(), Request{Messages: tc.msgs})
			require.NoError(t, err)
			require.Equal(t, resp, again, "template output must be deterministic")
		})
	}
}

func TestTemplateHonoursCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Template{}.Complete(ctx, Request{Messages: []Message{{Role: RoleUser, Content: "x"}}})
	require.ErrorIs(t, err, context.Canceled)
}

func TestNewSpecs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec, def string
		wantName  string
		wantErr   bool
	}{
		{spec: "template", wantName: "template"},
		{spec: "openai:gpt-4o-mini", wantName: "openai:gpt-4o-mini"},
		{spec: " openai:gpt-4o ", wantName: "openai:gpt-4o"},
		{spec: "", def: "template", wantName: "template"},
		{spec: "", def: "openai:m", wantName: "openai:m"},
		{spec: "template", def: "openai:m", wantName: "template"},
		{spec: "", wantErr: true},
		{spec: "gpt", wantErr: true},
		{spec: "foo:bar", wantErr: true},
		{spec: "openai:", wantErr: true},
		{spec: "", def: "nonsense", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"|"+tc.def, func(t *testing.T) {
			t.Parallel()
			m, err := New(tc.spec, tc.def, Config{})
			if tc.wantErr {
				require.Error(t, err)
				require.Nil(t, m)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantName, m.Name())
		})
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry("template", Config{})

	a, err := r.Get("openai:gpt-4o-mini")
	require.NoError(t, err)
	b, err := r.Get("openai:gpt-4o-mini")
	require.NoError(t, err)
	require.Same(t, a, b)

	other, err := r.Get("openai:gpt-4o")
	require.NoError(t, err)
	require.NotSame(t, a, other)

	def, err := r.Get("")
	require.NoError(t, err)
	tmpl, err := r.Get("template")
	require.NoError(t, err)
	require.Equal(t, "template", def.Name())
	require.Equal(t, def, tmpl)

	for _, bad := range []string{"gpt", "foo:bar", "openai:"} {
		m, err := r.Get(bad)
		require.Error(t, err, bad)
		require.Nil(t, m, bad)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRegistry("openai:m", Config{})
	const n = 32
	got := make([]Model, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := r.Get("")
			if err == nil {
				got[i] = m
			}
		})
	}
	wg.Wait()
	for i := range n {
		require.NotNil(t, got[i])
		require.Same(t, got[0], got[i])
	}
}

func TestIsTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("boom"), false},
		{"sentinel", ErrTransient, true},
		{"wrapped", &providerError{err: errors.New("x"), transient: true}, true},
		{"permanent provider", &providerError{err: errors.New("x")}, false},
		{"cancel wins", errors.Join(ErrTransient, context.Canceled), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, IsTransient(tc.err))
		})
	}
}
