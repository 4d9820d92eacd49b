package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/store"
)

type testBundle struct {
	srv  *httptest.Server
	db   store.Store
	keys map[string]string // role → API key
}

// setup serves the real router over a fresh store with the examples seeded
// and one API key per role.
func setup(t *testing.T) *testBundle { return engineSetup(t, "") }

// do sends a request as role ("" = no credentials) and decodes a JSON answer into out.
func (b *testBundle) do(t *testing.T, role, method, path, contentType string, body io.Reader, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(t, err)
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+b.keys[role])
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

func (b *testBundle) json(t *testing.T, role, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		body = bytes.NewReader(raw)
	}
	return b.do(t, role, method, path, "application/json", body, out)
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out map[string]string
	require.Equal(t, http.StatusOK, b.do(t, "", http.MethodGet, "/healthz", "", nil, &out))
	require.Equal(t, "ok", out["status"])
}

func TestMemos(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var m store.Memo
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/memos",
		map[string]any{"title": "Field notes", "body": "Kingfishers nest in banks.", "tags": []string{"birds"}}, &m))
	require.Equal(t, int64(1), m.ContentVersion)

	var got store.Memo
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos/"+m.ID, nil, &got))
	require.Equal(t, "Kingfishers nest in banks.", got.Body)

	var list struct{ Memos []store.Memo }
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q=kingfishers", nil, &list))
	require.Len(t, list.Memos, 1)
	require.Equal(t, m.ID, list.Memos[0].ID)

	var up store.Memo
	require.Equal(t, http.StatusOK, b.json(t, store.RoleSteward, http.MethodPut, "/api/memos/"+m.ID,
		map[string]any{"body": "Kingfishers nest in sandy banks.", "expectedVersion": 1}, &up))
	require.Equal(t, int64(2), up.ContentVersion)

	t.Run("StaleVersionConflictsAndChangesNothing", func(t *testing.T) {
		var e api.ErrorBody
		require.Equal(t, http.StatusConflict, b.json(t, store.RoleSteward, http.MethodPut, "/api/memos/"+m.ID,
			map[string]any{"body": "overwrite", "expectedVersion": 1}, &e))
		require.Equal(t, "conflict", e.Error.Code)
		var cur store.Memo
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos/"+m.ID, nil, &cur))
		require.Equal(t, "Kingfishers nest in sandy banks.", cur.Body)
		require.Equal(t, int64(2), cur.ContentVersion)
	})
}

// Unlisted memos (a dispatched memo is one) are listed for stewards and
// admins, as the console lists them, unless they ask not to; a viewer
// never sees them listed.
func TestUnlistedMemosListedForStewards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var listed, unlisted store.Memo
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/memos",
		map[string]any{"title": "Otters listed", "body": "Otters hold hands."}, &listed))
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/memos",
		map[string]any{"title": "Otters unlisted", "body": "Otters sleep afloat.", "unlisted": true}, &unlisted))
	for _, tc := range []struct {
		role, query string
		want        []string
	}{
		{store.RoleViewer, "", []string{listed.ID}},
		{store.RoleViewer, "&includeUnlisted=false", []string{listed.ID}},
		{store.RoleSteward, "", []string{unlisted.ID, listed.ID}},
		{store.RoleAdmin, "", []string{unlisted.ID, listed.ID}},
		{store.RoleSteward, "&includeUnlisted=false", []string{listed.ID}},
		{store.RoleSteward, "&includeUnlisted=true", []string{unlisted.ID, listed.ID}},
	} {
		var list struct{ Memos []store.Memo }
		require.Equal(t, http.StatusOK, b.json(t, tc.role, http.MethodGet, "/api/memos?q=otters"+tc.query, nil, &list), tc.role+tc.query)
		var ids []string
		for _, m := range list.Memos {
			ids = append(ids, m.ID)
		}
		require.ElementsMatch(t, tc.want, ids, tc.role+tc.query)
	}
}

func TestMemoErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"title":"t","body":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	for _, tc := range []struct {
		name        string
		role        string
		method      string
		path        string
		contentType string
		body        string
		status      int
		code        string
	}{
		{"NoKey", "", "GET", "/api/memos", "", "", 401, "unauthorized"},
		{"UnknownMemo", store.RoleViewer, "GET", "/api/memos/mem_nope", "", "", 404, "not_found"},
		{"MalformedJSON", store.RoleSteward, "POST", "/api/memos", "application/json", `{"title":`, 400, "bad_request"},
		{"UnknownField", store.RoleSteward, "POST", "/api/memos", "application/json", `{"title":"t","body":"b","colour":"red"}`, 400, "bad_request"},
		{"MissingTitle", store.RoleSteward, "POST", "/api/memos", "application/json", `{"body":"b"}`, 400, "bad_request"},
		{"NotJSON", store.RoleSteward, "POST", "/api/memos", "text/plain", `{"title":"t","body":"b"}`, 415, "unsupported_media_type"},
		{"Oversize", store.RoleSteward, "POST", "/api/memos", "application/json", big, 413, "too_large"},
		{"ViewerCannotWrite", store.RoleViewer, "POST", "/api/memos", "application/json", `{"title":"t","body":"b"}`, 403, "forbidden"},
		{"StewardCannotWriteWorkflows", store.RoleSteward, "POST", "/api/memos", "application/json", `{"title":"t","body":"b","memoType":"workflow"}`, 403, "forbidden"},
		{"UnknownMemoType", store.RoleSteward, "POST", "/api/memos", "application/json", `{"title":"t","body":"b","memoType":"recipe"}`, 400, "bad_request"},
		{"UpdateWithoutVersion", store.RoleSteward, "PUT", "/api/memos/mem_nope", "application/json", `{"body":"b"}`, 400, "bad_request"},
		{"UnknownRoute", store.RoleViewer, "GET", "/api/nothing-here", "", "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e api.ErrorBody
			require.Equal(t, tc.status, b.do(t, tc.role, tc.method, tc.path, tc.contentType, strings.NewReader(tc.body), &e))
			require.Equal(t, tc.code, e.Error.Code)
			require.NotEmpty(t, e.Error.Message)
			if tc.name == "UnknownMemoType" {
				require.Contains(t, e.Error.Message, "note, workflow", "the answer lists the types allowed")
			}
		})
	}
	var list struct{ Memos []store.Memo }
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q=t", nil, &list))
	for _, m := range list.Memos {
		require.NotEqual(t, "t", m.Title, "a refused request wrote nothing")
	}
}

type workflowList struct {
	Workflows []store.Workflow `json:"workflows"`
}

func TestWorkflowsListExamplesWithoutErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out workflowList
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/workflows", nil, &out))
	commands := map[string]store.Workflow{}
	for _, w := range out.Workflows {
		commands[w.Command] = w
	}
	for _, c := range []string{"/draft-memo", "/summarize-thread", "/weekly-digest"} {
		require.Contains(t, commands, c)
		require.Empty(t, commands[c].Errors, c)
		require.Equal(t, "live", commands[c].Status)
	}
}

// TestWorkflowCompileErrorsListed imports broken workflow memos and expects
// each mistake listed with its line number, and nothing to crash.
func TestWorkflowCompileErrorsListed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const base = "# Broken\n\n## Trigger\n- **Command** `%s`\n- **Status** `%s`\n\n## Load Contract\n- **Gate** %s\n\n## Steps\n1. **%s** Do it.\n   ```prompt\n   {{.Payload.brief}}\n   ```\n2. **Output** Ship it.\n\n## Policy\n- **Destination** `%s`\n- **Timeout** `%s`\n"
	for _, tc := range []struct {
		name                                       string
		command, status, gate, kind, dest, timeout string
		line                                       int
		msg                                        string
	}{
		{"BadStatus", "/b1", "sometimes", "Style guide", "Process", "memo", "2m", 5, "Status"},
		{"WorktreeRefused", "/b2", "live", "Style guide", "Process", "worktree", "2m", 18, "worktree"},
		{"UnknownStepKind", "/b3", "live", "Style guide", "Ponder", "memo", "2m", 11, "Ponder"},
		{"BadDuration", "/b4", "live", "Style guide", "Process", "memo", "soon", 19, "soon"},
		{"MissingGate", "/b5", "live", "No such memo", "Process", "memo", "2m", 8, "No such memo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := fmt.Sprintf(base, tc.command, tc.status, tc.gate, tc.kind, tc.dest, tc.timeout)
			require.Equal(t, http.StatusCreated, b.json(t, store.RoleAdmin, http.MethodPost, "/api/memos",
				map[string]any{"title": tc.name, "body": body, "memoType": "workflow"}, nil))
			var out workflowList
			require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/workflows", nil, &out))
			var found *store.Workflow
			for i := range out.Workflows {
				if out.Workflows[i].Command == tc.command {
					found = &out.Workflows[i]
				}
			}
			require.NotNil(t, found, "a broken workflow is still listed under its command")
			require.NotEmpty(t, found.Errors)
			var lines []int
			for _, e := range found.Errors {
				lines = append(lines, e.Line)
				if e.Line == tc.line {
					require.Contains(t, e.Message, tc.msg)
				}
			}
			require.Contains(t, lines, tc.line, found.Errors)
		})
	}

	t.Run("MissingAndDuplicateCommand", func(t *testing.T) {
		t.Parallel()
		noCommand := "# No command\n\n## Trigger\n- **Status** `live`\n\n## Load Contract\n\n## Steps\n1. **Output** Ship.\n\n## Policy\n"
		require.Equal(t, http.StatusCreated, b.json(t, store.RoleAdmin, http.MethodPost, "/api/memos",
			map[string]any{"title": "No command", "body": noCommand, "memoType": "workflow"}, nil))
		var out workflowList
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/workflows", nil, &out))
		var msgs []string
		for _, w := range out.Workflows {
			if w.Title == "No command" {
				for _, e := range w.Errors {
					msgs = append(msgs, e.Message)
				}
			}
		}
		require.NotEmpty(t, msgs)
		require.Contains(t, strings.Join(msgs, "\n"), "Command")

		var e api.ErrorBody
		dup := strings.Replace(noCommand, "- **Status**", "- **Command** `/draft-memo`\n- **Status**", 1)
		require.Equal(t, http.StatusConflict, b.json(t, store.RoleAdmin, http.MethodPost, "/api/memos",
			map[string]any{"title": "Dup", "body": dup, "memoType": "workflow"}, &e))
		require.Contains(t, e.Error.Message, "/draft-memo")
	})
}

// TestBearerScheme: the Authorization scheme is matched without regard to
// case (RFC 9110 §11.1); anything but a bearer token is 401.
func TestBearerScheme(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.keys[store.RoleViewer]
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer " + key, http.StatusOK},
		{"bearer " + key, http.StatusOK},
		{"BEARER " + key, http.StatusOK},
		{"Basic " + key, http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer" + key, http.StatusUnauthorized},
		{"Bearer " + key + "x", http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/api/workflows", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", tc.header)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, "%q", tc.header)
	}
}
