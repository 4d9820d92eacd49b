package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
)

// The acceptance tests drive `bot` exactly as an operator and an API client
// would — the CLI through run(), the service through startServe — and check
// the contract of SPEC §1, §7 and §8: routes, JSON field names, list
// wrapping, RFC 3339 UTC times and status codes.

// TestMain runs this package in a zone that is not UTC, so any time that
// reaches JSON without passing through UTC shows up as "+05:30" instead of
// hiding behind a machine whose zone happens to be UTC. It is set before any
// test starts, so no goroutine reads time.Local while it changes.
func TestMain(m *testing.M) {
	time.Local = time.FixedZone("IST", 5*3600+30*60)
	code := m.Run()
	bottest.Cleanup()
	os.Exit(code)
}

const acceptanceInternalKey = "acceptance-internal-key"

// Documented field names, SPEC §7 (extra fields are allowed).
var (
	memoKeys     = []string{"id", "title", "body", "memoType", "tags", "notes", "unlisted", "contentVersion", "contentHash", "createdAt", "updatedAt"}
	workflowKeys = []string{"memoId", "command", "status", "summary", "invoke", "errors"}
	itemKeys     = []string{"id", "workflowMemoId", "command", "dedupeKey", "status", "runId", "sessionId", "createdAt"}
	runKeys      = []string{"id", "itemId", "command", "sessionId", "status", "steps", "errorKind", "error", "guards", "hold", "dispatch", "recoveryAttempts"}
	stepKeys     = []string{"kind", "status", "startedAt", "durationMs", "tokensIn", "tokensOut", "errorKind", "error"}
	holdKeys     = []string{"id", "runId", "command", "gateLabel", "status", "preview", "approvals", "decidedBy", "decidedVia", "decidedAt", "comment", "createdAt"}
	sessionKeys  = []string{"id", "title", "status", "doneReason", "origin", "platform", "tags", "context", "capabilities", "archived", "forkedFrom", "policy", "requestCount", "lastActiveAt", "createdAt", "openHolds", "activeRunId"}
	eventKeys    = []string{"id", "ts", "type", "actor", "payload"}
	cronKeys     = []string{"pending", "started", "failedItems", "resumed", "recovered", "exhausted"}
	errorKeys    = []string{"code", "message"}
)

// Fields holding times, checked wherever they are present and not null.
var timeKeys = []string{"createdAt", "updatedAt", "lastActiveAt", "startedAt", "decidedAt", "ts", "claimedAt", "settledAt", "heartbeatAt", "finishedAt", "at", "expiresAt"}

type obj = map[string]any

// requireShape checks that v is an object carrying every documented key
// and that each time it holds is RFC 3339 in UTC.
func requireShape(t *testing.T, v any, keys []string, what string) obj {
	t.Helper()
	o, ok := v.(obj)
	require.Truef(t, ok, "%s is an object, got %T", what, v)
	for _, k := range keys {
		require.Containsf(t, o, k, "%s has field %q", what, k)
	}
	requireUTCTimes(t, o, what)
	return o
}

func requireUTCTimes(t *testing.T, o obj, what string) {
	t.Helper()
	for _, k := range timeKeys {
		s, ok := o[k].(string)
		if !ok {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoErrorf(t, err, "%s.%s is RFC 3339", what, k)
		require.Truef(t, strings.HasSuffix(s, "Z"), "%s.%s is UTC: %s", what, k, s)
		require.Equal(t, time.UTC, ts.Location(), "%s.%s", what, k)
	}
}

// requireList checks that o[key] is a JSON array (never null) and returns it.
func requireList(t *testing.T, o obj, key string) []any {
	t.Helper()
	l, ok := o[key].([]any)
	require.Truef(t, ok, "%q is a list, got %#v", key, o[key])
	return l
}

// acc is one running service with the keys and users the tests act as.
type acc struct {
	url  string
	env  map[string]string
	dir  string
	keys map[string]string // viewer, steward, steward2, admin
	http *http.Client
}

// req is one API call. Body may be a string (sent as is) or a value
// (encoded); ctype defaults to application/json when there is a body.
type req struct {
	method, path, key string
	body              any
	ctype             string
	header            map[string]string
}

func (a *acc) do(t *testing.T, r req) (int, obj) {
	t.Helper()
	var body io.Reader
	if r.body != nil {
		if s, ok := r.body.(string); ok {
			body = strings.NewReader(s)
		} else {
			b, err := json.Marshal(r.body)
			require.NoError(t, err)
			body = bytes.NewReader(b)
		}
		if r.ctype == "" {
			r.ctype = "application/json"
		}
	}
	hr, err := http.NewRequest(r.method, a.url+r.path, body)
	require.NoError(t, err)
	if r.ctype != "" {
		hr.Header.Set("Content-Type", r.ctype)
	}
	if k, ok := a.keys[r.key]; ok {
		hr.Header.Set("Authorization", "Bearer "+k)
	} else if r.key != "" {
		hr.Header.Set("Authorization", r.key)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	client := a.http
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hr)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out obj
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoErrorf(t, json.Unmarshal(raw, &out), "%s %s answers a JSON object: %s", r.method, r.path, raw)
	}
	if resp.StatusCode >= 400 && strings.HasPrefix(r.path, "/api/") {
		require.NotNilf(t, out, "%s %s: errors are JSON: %s", r.method, r.path, raw)
		e := requireShape(t, out["error"], errorKeys, "error")
		require.NotEmptyf(t, e["message"], "%s %s: an error says what went wrong", r.method, r.path)
		if resp.StatusCode < 500 {
			require.NotContainsf(t, []any{"", "internal"}, e["code"], "%s %s: a client error has a client error code", r.method, r.path)
		}
	}
	return resp.StatusCode, out
}

// ok performs r and requires status want.
func (a *acc) ok(t *testing.T, want int, r req) obj {
	t.Helper()
	status, out := a.do(t, r)
	require.Equalf(t, want, status, "%s %s: %v", r.method, r.path, out)
	return out
}

func (a *acc) cli(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := runCLI(t, a.env, stdin, args...)
	require.NoError(t, err, out)
	return out
}

// lastLine is how scripts read `bot apikey create`'s key (SPEC §1).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

const (
	pausedWorkflow = "# Paused probe\n\n## Trigger\n- **Command** `/paused-probe`\n- **Invoke** A row appears in the workflow's queue\n" +
		"- **Status** `paused`\n- **Summary** Never accepts work\n\n## Load Contract\n\n## Steps\n1. **Process** Echo.\n" +
		"   ```prompt\n   {{.Payload.brief}}\n   ```\n2. **Output** Dispatch.\n\n## Policy\n- **Approval** `auto`\n"
	echoWorkflow = "# Echo probe\n\n## Trigger\n- **Command** `/echo-probe`\n- **Invoke** A row appears in the workflow's queue\n" +
		"- **Status** `live`\n- **Summary** Echoes the brief into a memo\n\n## Load Contract\n\n## Steps\n1. **Process** Echo.\n" +
		"   ```prompt\n   # Echo\n\n   {{.Payload.brief}}\n   ```\n2. **Output** Dispatch.\n\n## Policy\n- **Approval** `auto`\n- **Timeout** `90s`\n"
	brokenWorkflow = "# Broken probe\n\n## Trigger\n- **Command** `/broken-probe`\n- **Invoke** A row appears in the workflow's queue\n" +
		"- **Status** `live`\n- **Summary** Does not compile\n\n## Load Contract\n\n## Steps\n1. **Output** Dispatch.\n\n" +
		"## Policy\n- **Destination** `worktree`\n"
)

// setupAcceptance prepares a database with the CLI alone (users, keys,
// imported workflows), then serves it.
func setupAcceptance(t *testing.T, internalKey string) *acc {
	t.Helper()
	dir := t.TempDir()
	a := &acc{dir: dir, keys: map[string]string{}, env: map[string]string{
		"HOLDFAST_DB":             filepath.Join(dir, "holdfast.db"),
		"HOLDFAST_ADMIN_PASSWORD": "admin-password-1",
	}}
	if internalKey != "" {
		a.env["HOLDFAST_INTERNAL_KEY"] = internalKey
	}
	a.cli(t, "", "migrate")
	require.Contains(t, a.cli(t, "steward-password\n", "user", "add", "--username", "stella", "--password-file", "-", "--role", "steward", "--slack-user", "U123"),
		"created user stella")
	for name, role := range map[string]string{"viewer": "viewer", "steward": "steward", "steward2": "steward", "admin": "admin"} {
		out := a.cli(t, "", "apikey", "create", "--name", name, "--role", role)
		key := lastLine(out)
		require.Regexp(t, `^\S{32,}$`, key, "the key is the last line of stdout")
		a.keys[name] = key
	}
	wf := filepath.Join(dir, "workflows")
	require.NoError(t, os.MkdirAll(wf, 0o755))
	for name, body := range map[string]string{"paused.md": pausedWorkflow, "echo.md": echoWorkflow, "broken.md": brokenWorkflow} {
		require.NoError(t, os.WriteFile(filepath.Join(wf, name), []byte(body), 0o600))
	}
	out, err := runCLI(t, a.env, "", "workflow", "import", wf)
	require.ErrorContains(t, err, "do not compile", "a memo that does not compile fails the import (SPEC §8)")
	require.Contains(t, out, "created")
	require.Contains(t, out, "/echo-probe")
	require.Regexp(t, `broken\.md:\d+: .*worktree`, out, "import prints compile errors with line numbers")
	again, err := runCLI(t, a.env, "", "workflow", "import", wf)
	require.Error(t, err, "still broken")
	require.NotContains(t, again, "created", "import is idempotent by command")

	a.url, _ = startServe(t, a.env)
	return a
}

// waitRun polls an item until its run reaches one of statuses, returning the run.
func (a *acc) waitRun(t *testing.T, itemID string, statuses ...string) obj {
	t.Helper()
	var run obj
	require.Eventually(t, func() bool {
		_, it := a.do(t, req{method: http.MethodGet, path: "/api/queue/" + itemID, key: "viewer"})
		runID, _ := it["runId"].(string)
		if runID == "" {
			return false
		}
		_, run = a.do(t, req{method: http.MethodGet, path: "/api/runs/" + runID, key: "viewer"})
		for _, s := range statuses {
			if run["status"] == s {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "run of item %s reaches %v", itemID, statuses)
	return run
}

func TestAcceptanceAPI(t *testing.T) {
	t.Parallel()
	a := setupAcceptance(t, acceptanceInternalKey)

	t.Run("Healthz", func(t *testing.T) {
		a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/healthz"})
	})

	t.Run("Metrics", func(t *testing.T) {
		a.ok(t, http.StatusUnauthorized, req{method: http.MethodGet, path: "/metrics"})
		a.ok(t, http.StatusUnauthorized, req{method: http.MethodGet, path: "/metrics", key: "Bearer wrong"})
		a.ok(t, http.StatusUnauthorized, req{method: http.MethodGet, path: "/metrics", key: "admin"}) // an API key is not the internal key
		hr, err := http.NewRequest(http.MethodGet, a.url+"/metrics", nil)
		require.NoError(t, err)
		hr.Header.Set("Authorization", "Bearer "+acceptanceInternalKey)
		resp, err := http.DefaultClient.Do(hr)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
		require.Contains(t, string(b), "# TYPE ")
	})

	t.Run("Workflows", func(t *testing.T) {
		out := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/workflows", key: "viewer"})
		byCommand := map[string]obj{}
		for _, w := range requireList(t, out, "workflows") {
			o := requireShape(t, w, workflowKeys, "workflow")
			requireList(t, o, "errors")
			byCommand[o["command"].(string)] = o
		}
		for _, c := range []string{"/draft-memo", "/summarize-thread", "/weekly-digest", "/echo-probe", "/paused-probe", "/broken-probe"} {
			require.Contains(t, byCommand, c)
		}
		require.Equal(t, "paused", byCommand["/paused-probe"]["status"])
		require.Empty(t, byCommand["/echo-probe"]["errors"])
		errs := requireList(t, byCommand["/broken-probe"], "errors")
		require.NotEmpty(t, errs)
		e := requireShape(t, errs[0], []string{"line", "message"}, "compile error")
		require.Greater(t, e["line"], float64(0))
		require.Contains(t, e["message"], "worktree")
	})

	t.Run("Memos", func(t *testing.T) {
		m := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/memos", key: "steward",
			body: obj{"title": "Acceptance brief", "body": "quokkas are small marsupials", "tags": []string{"brief"}, "notes": "n"}})
		requireShape(t, m, memoKeys, "memo")
		id := m["id"].(string)
		require.Equal(t, float64(1), m["contentVersion"])

		list := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos?q=quokkas", key: "viewer"})
		memos := requireList(t, list, "memos")
		require.Len(t, memos, 1)
		requireShape(t, memos[0], memoKeys, "listed memo")
		empty := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos?q=nothingmatchesthis", key: "viewer"})
		require.Empty(t, requireList(t, empty, "memos"))
		for _, q := range []string{`"unbalanced`, "NEAR(", "*", "a OR"} {
			requireList(t, a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos?q=" + url.QueryEscape(q), key: "viewer"}), "memos")
		}
		wfs := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos?memoType=workflow", key: "viewer"})
		for _, w := range requireList(t, wfs, "memos") {
			require.Equal(t, "workflow", w.(obj)["memoType"])
		}

		got := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos/" + id, key: "viewer"})
		requireShape(t, got, memoKeys, "memo")
		upd := a.ok(t, http.StatusOK, req{method: http.MethodPut, path: "/api/memos/" + id, key: "steward",
			body: obj{"title": "Renamed", "body": "quokkas smile", "expectedVersion": 1}})
		requireShape(t, upd, memoKeys, "updated memo")
		require.Equal(t, float64(2), upd["contentVersion"])
		require.Equal(t, "Renamed", upd["title"])

		for _, tc := range []struct {
			name string
			r    req
			want int
		}{
			{"StaleVersion", req{method: http.MethodPut, path: "/api/memos/" + id, key: "steward", body: obj{"body": "clobber", "expectedVersion": 1}}, http.StatusConflict},
			{"UnknownID", req{method: http.MethodGet, path: "/api/memos/mem_nope", key: "viewer"}, http.StatusNotFound},
			{"UnknownIDUpdate", req{method: http.MethodPut, path: "/api/memos/mem_nope", key: "steward", body: obj{"body": "x", "expectedVersion": 1}}, http.StatusNotFound},
			{"MissingVersion", req{method: http.MethodPut, path: "/api/memos/" + id, key: "steward", body: obj{"body": "x"}}, http.StatusBadRequest},
			{"ViewerMayNotWrite", req{method: http.MethodPost, path: "/api/memos", key: "viewer", body: obj{"title": "t", "body": "b"}}, http.StatusForbidden},
			{"NoKey", req{method: http.MethodGet, path: "/api/memos"}, http.StatusUnauthorized},
			{"BadKey", req{method: http.MethodGet, path: "/api/memos", key: "Bearer not-a-key"}, http.StatusUnauthorized},
			{"NotBearer", req{method: http.MethodGet, path: "/api/memos", key: "Basic YTpi"}, http.StatusUnauthorized},
			{"BadJSON", req{method: http.MethodPost, path: "/api/memos", key: "steward", body: `{"title":`}, http.StatusBadRequest},
			{"UnknownField", req{method: http.MethodPost, path: "/api/memos", key: "steward", body: `{"title":"t","body":"b","bogus":1}`}, http.StatusBadRequest},
			{"NotJSON", req{method: http.MethodPost, path: "/api/memos", key: "steward", body: `{"title":"t","body":"b"}`, ctype: "text/plain"}, http.StatusUnsupportedMediaType},
			{"NoContentType", req{method: http.MethodPost, path: "/api/memos", key: "steward", body: `{"title":"t","body":"b"}`, ctype: "-"}, http.StatusUnsupportedMediaType},
			{"Oversize", req{method: http.MethodPost, path: "/api/memos", key: "steward",
				body: `{"title":"t","body":"` + strings.Repeat("x", 1<<20+1) + `"}`}, http.StatusRequestEntityTooLarge},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.r.ctype == "-" {
					tc.r.ctype = ""
					tc.r.header = map[string]string{"Content-Type": ""}
				}
				a.ok(t, tc.want, tc.r)
			})
		}
		after := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos/" + id, key: "viewer"})
		require.Equal(t, "quokkas smile", after["body"], "refused writes changed nothing")
		require.Equal(t, float64(2), after["contentVersion"])
	})

	t.Run("EnqueueHoldDecideDispatch", func(t *testing.T) {
		body := obj{"dedupeKey": "acc-1", "payload": obj{"title": "Acceptance", "brief": "A held draft."}}
		first := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/workflows/draft-memo/enqueue", key: "steward", body: body})
		require.Equal(t, true, first["enqueued"])
		item := requireShape(t, first["item"], itemKeys, "item")
		require.Equal(t, "/draft-memo", item["command"])
		require.Equal(t, "acc-1", item["dedupeKey"])
		again := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/workflows/draft-memo/enqueue", key: "steward", body: body})
		require.Equal(t, false, again["enqueued"])
		require.Equal(t, item["id"], requireShape(t, again["item"], itemKeys, "item")["id"], "a second enqueue answers the existing item")
		requireShape(t, a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/queue/" + item["id"].(string), key: "viewer"}), itemKeys, "item")

		run := a.waitRun(t, item["id"].(string), "suspended")
		requireShape(t, run, runKeys, "run")
		require.Equal(t, item["id"], run["itemId"])
		require.Equal(t, item["sessionId"], run["sessionId"])
		require.Nil(t, run["dispatch"], "dispatch is null until dispatched")
		for i, s := range requireList(t, run, "steps") {
			requireShape(t, s, stepKeys, "step")
			require.NotNilf(t, s.(obj)["startedAt"], "step %d started", i)
		}
		policy := run["manifest"].(obj)["policy"].(obj)
		require.Equal(t, "2m0s", policy["timeout"], "durations read as people write them")
		require.Equal(t, "0s", policy["holdTimeout"])
		hold := requireShape(t, run["hold"], holdKeys, "run.hold")
		require.Equal(t, "open", hold["status"])
		require.Equal(t, "Review draft", hold["gateLabel"])
		require.Nil(t, hold["decidedAt"])
		require.Empty(t, requireList(t, hold, "approvals"))
		holdID := hold["id"].(string)

		runs := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/runs?status=suspended", key: "viewer"})
		require.Equal(t, "", runs["next"], "runs are a paged list; one page holds these")
		var found bool
		for _, r := range requireList(t, runs, "runs") {
			o := requireShape(t, r, runKeys, "listed run")
			require.Equal(t, "suspended", o["status"])
			requireShape(t, o["hold"], holdKeys, "listed run's hold")
			found = found || o["id"] == run["id"]
		}
		require.True(t, found, "the suspended run is listed")
		holds := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds?status=open", key: "viewer"})
		require.Equal(t, "", holds["next"], "holds are a paged list; one page holds these")
		found = false
		for _, h := range requireList(t, holds, "holds") {
			o := requireShape(t, h, holdKeys, "listed hold")
			require.Equal(t, "open", o["status"])
			found = found || o["id"] == holdID
		}
		require.True(t, found, "the open hold is listed")

		// Pages of one reach every run, newest first, each once.
		every := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/runs?limit=200", key: "viewer"})
		walked := map[string]bool{}
		for cursor, pages := "", 0; ; pages++ {
			out := a.ok(t, http.StatusOK, req{method: http.MethodGet, key: "viewer", path: "/api/runs?limit=1&cursor=" + url.QueryEscape(cursor)})
			for _, r := range requireList(t, out, "runs") {
				id := requireShape(t, r, runKeys, "paged run")["id"].(string)
				require.False(t, walked[id], "pages do not overlap")
				walked[id] = true
			}
			require.Contains(t, out, "next", "paged lists carry next")
			if cursor = out["next"].(string); cursor == "" {
				break
			}
			require.Less(t, pages, 200)
		}
		for _, r := range requireList(t, every, "runs") {
			require.True(t, walked[r.(obj)["id"].(string)], "paging reaches every run")
		}
		requireShape(t, a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds/" + holdID, key: "viewer"}), holdKeys, "hold")

		decide := "/api/holds/" + holdID + "/decision"
		for _, tc := range []struct {
			name string
			r    req
			want int
		}{
			{"ViewerIsNotASteward", req{method: http.MethodPost, path: decide, key: "viewer", body: obj{"decision": "approve"}}, http.StatusForbidden},
			{"EnqueuerMayNotSelfApprove", req{method: http.MethodPost, path: decide, key: "steward", body: obj{"decision": "approve"}}, http.StatusForbidden},
			{"BadDecision", req{method: http.MethodPost, path: decide, key: "steward2", body: obj{"decision": "maybe"}}, http.StatusBadRequest},
			{"BadJSON", req{method: http.MethodPost, path: decide, key: "steward2", body: `{"decision":`}, http.StatusBadRequest},
			{"NotJSON", req{method: http.MethodPost, path: decide, key: "steward2", body: `{"decision":"approve"}`, ctype: "text/plain"}, http.StatusUnsupportedMediaType},
			{"UnknownHold", req{method: http.MethodPost, path: "/api/holds/hld_nope/decision", key: "steward2", body: obj{"decision": "approve"}}, http.StatusNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) { a.ok(t, tc.want, tc.r) })
		}
		require.Equal(t, "open", a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds/" + holdID, key: "viewer"})["status"],
			"refused decisions change nothing")

		decided := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: decide, key: "steward2", body: obj{"decision": "approve", "comment": "ship it"}})
		requireShape(t, decided, holdKeys, "decided hold")
		require.Equal(t, "approved", decided["status"])
		require.Equal(t, "api", decided["decidedVia"])
		require.Equal(t, "ship it", decided["comment"])
		require.NotNil(t, decided["decidedAt"])
		approvals := requireList(t, decided, "approvals")
		require.Len(t, approvals, 1)
		requireUTCTimes(t, approvals[0].(obj), "approval")

		status, conflict := a.do(t, req{method: http.MethodPost, path: decide, key: "admin", body: obj{"decision": "reject"}})
		require.Equal(t, http.StatusConflict, status, "a hold is decided once")
		require.Contains(t, conflict["error"].(obj)["message"], decided["decidedBy"], "the conflict names who decided")

		done := a.waitRun(t, item["id"].(string), "succeeded")
		requireShape(t, done, runKeys, "run")
		dispatch := requireShape(t, done["dispatch"], []string{"memoId"}, "dispatch")
		memo := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos/" + dispatch["memoId"].(string), key: "viewer"})
		require.Equal(t, "Acceptance", memo["title"])
		requireShape(t, done["hold"], holdKeys, "run.hold")
		outcomes := map[any]int{}
		for _, d := range requireList(t, done, "decisions") {
			o := requireShape(t, d, []string{"decision", "decidedBy", "outcome", "createdAt"}, "audit entry")
			outcomes[o["outcome"]]++
		}
		require.Equal(t, map[any]int{"refused": 2, "accepted": 1, "conflict": 1}, outcomes,
			"every decision attempt, accepted or refused, is audited")
	})

	t.Run("EnqueueErrors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			r    req
			want int
		}{
			{"UnknownCommand", req{method: http.MethodPost, path: "/api/workflows/no-such-command/enqueue", key: "steward", body: obj{"dedupeKey": "x"}}, http.StatusNotFound},
			{"NotLive", req{method: http.MethodPost, path: "/api/workflows/paused-probe/enqueue", key: "steward", body: obj{"dedupeKey": "x"}}, http.StatusConflict},
			{"DoesNotCompile", req{method: http.MethodPost, path: "/api/workflows/broken-probe/enqueue", key: "steward", body: obj{"dedupeKey": "x"}}, http.StatusConflict},
			{"MissingDedupeKey", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward", body: obj{"payload": obj{}}}, http.StatusBadRequest},
			{"BadJSON", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward", body: `{"dedupeKey":"x"`}, http.StatusBadRequest},
			{"PayloadNotObject", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward", body: `{"dedupeKey":"x","payload":[1]}`}, http.StatusBadRequest},
			{"NotJSON", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward", body: `{"dedupeKey":"x"}`, ctype: "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
			{"Oversize", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward",
				body: `{"dedupeKey":"x","payload":{"brief":"` + strings.Repeat("y", 2<<20) + `"}}`}, http.StatusRequestEntityTooLarge},
			{"ViewerMayNotEnqueue", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "viewer", body: obj{"dedupeKey": "x"}}, http.StatusForbidden},
			{"BadKey", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "Bearer nope", body: obj{"dedupeKey": "x"}}, http.StatusUnauthorized},
			{"UnknownSession", req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward", body: obj{"dedupeKey": "x", "sessionId": "ses_nope"}}, http.StatusNotFound},
			{"UnknownItem", req{method: http.MethodGet, path: "/api/queue/itm_nope", key: "viewer"}, http.StatusNotFound},
			{"UnknownRun", req{method: http.MethodGet, path: "/api/runs/run_nope", key: "viewer"}, http.StatusNotFound},
			{"UnknownHold", req{method: http.MethodGet, path: "/api/holds/hld_nope", key: "viewer"}, http.StatusNotFound},
			{"BadRunStatus", req{method: http.MethodGet, path: "/api/runs?status=bogus", key: "viewer"}, http.StatusBadRequest},
			{"BadHoldStatus", req{method: http.MethodGet, path: "/api/holds?status=bogus", key: "viewer"}, http.StatusBadRequest},
			{"BadRunsCursor", req{method: http.MethodGet, path: "/api/runs?cursor=not-a-cursor", key: "viewer"}, http.StatusBadRequest},
			{"BadRunsLimit", req{method: http.MethodGet, path: "/api/runs?limit=500", key: "viewer"}, http.StatusBadRequest},
			{"BadHoldsCursor", req{method: http.MethodGet, path: "/api/holds?status=open&cursor=not-a-cursor", key: "viewer"}, http.StatusBadRequest},
			{"BadHoldsLimit", req{method: http.MethodGet, path: "/api/holds?limit=0", key: "viewer"}, http.StatusBadRequest},
			{"UnknownMemoType", req{method: http.MethodPost, path: "/api/memos", key: "steward", body: obj{"title": "t", "body": "b", "memoType": "recipe"}}, http.StatusBadRequest},
			{"UnknownRoute", req{method: http.MethodGet, path: "/api/nope", key: "viewer"}, http.StatusNotFound},
			{"WrongMethod", req{method: http.MethodGet, path: "/api/workflows/echo-probe/enqueue", key: "viewer"}, http.StatusMethodNotAllowed},
		} {
			t.Run(tc.name, func(t *testing.T) { a.ok(t, tc.want, tc.r) })
		}
		_, broken := a.do(t, req{method: http.MethodPost, path: "/api/workflows/broken-probe/enqueue", key: "steward", body: obj{"dedupeKey": "x"}})
		require.Contains(t, broken["error"].(obj)["message"], "does not compile", "the conflict names the real reason")
		out := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/runs?status=running", key: "viewer"})
		requireList(t, out, "runs")
	})

	t.Run("ConcurrentEnqueueIsIdempotent", func(t *testing.T) {
		const n = 8
		statuses := make(chan int, n)
		for range n {
			go func() {
				hr, err := http.NewRequest(http.MethodPost, a.url+"/api/workflows/echo-probe/enqueue",
					strings.NewReader(`{"dedupeKey":"race-1","payload":{"brief":"once"}}`))
				if err != nil {
					statuses <- 0
					return
				}
				hr.Header.Set("Content-Type", "application/json")
				hr.Header.Set("Authorization", "Bearer "+a.keys["steward"])
				resp, err := http.DefaultClient.Do(hr)
				if err != nil {
					statuses <- 0
					return
				}
				resp.Body.Close()
				statuses <- resp.StatusCode
			}()
		}
		got := map[int]int{}
		for range n {
			got[<-statuses]++
		}
		require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: n - 1}, got, "one 201, the rest 200 with the same item")
	})

	t.Run("Sessions", func(t *testing.T) {
		created := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/sessions", key: "steward",
			body: obj{"title": "acceptance chat", "tag": "acceptance:1", "context": obj{"k": "v"}}})
		s := requireShape(t, created, sessionKeys, "session")
		id := s["id"].(string)
		requireList(t, s, "tags")
		requireList(t, s, "capabilities")
		a.ok(t, http.StatusConflict, req{method: http.MethodPost, path: "/api/sessions", key: "steward", body: obj{"tag": "acceptance:1"}})

		requireShape(t, a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/" + id, key: "viewer"}), sessionKeys, "session")
		res := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/resolve?tag=acceptance:1", key: "viewer"})
		require.Equal(t, id, res["id"])

		a.ok(t, http.StatusAccepted, req{method: http.MethodPost, path: "/api/sessions/" + id + "/messages", key: "steward", body: obj{"text": "hello"}})
		var events []any
		require.Eventually(t, func() bool {
			_, out := a.do(t, req{method: http.MethodGet, path: "/api/sessions/" + id + "/events", key: "viewer"})
			events, _ = out["events"].([]any)
			return len(events) >= 2 // the message and the template model's reply
		}, 20*time.Second, 20*time.Millisecond)
		for _, e := range events {
			o := requireShape(t, e, eventKeys, "event")
			require.Regexp(t, `\.\d{6}Z$`, o["ts"], "event times are UTC with microseconds")
		}
		first := events[0].(obj)
		require.Equal(t, "user_message", first["type"])
		newer := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/" + id + "/events?after=" + url.QueryEscape(first["ts"].(string)), key: "viewer"})
		for _, e := range requireList(t, newer, "events") {
			require.NotEqual(t, first["id"], e.(obj)["id"], "after is exclusive")
		}

		for _, c := range []string{"/status", "/compact", "/terminate"} {
			out := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/commands", key: "steward", body: obj{"command": c}})
			requireShape(t, out["session"], sessionKeys, c+" session")
		}
		fork := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/sessions/" + id + "/fork", key: "steward", body: obj{"atTs": first["ts"]}})
		requireShape(t, fork, sessionKeys, "fork")
		require.Equal(t, id, fork["forkedFrom"])
		forkEvents := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/" + fork["id"].(string) + "/events", key: "viewer"})
		require.Len(t, requireList(t, forkEvents, "events"), 1, "a fork holds only the events up to atTs")

		arch := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/archive", key: "steward"})
		require.Equal(t, true, requireShape(t, arch, sessionKeys, "archived")["archived"])
		unarch := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/unarchive", key: "steward"})
		require.Equal(t, false, unarch["archived"])
		pol := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/policy", key: "steward", body: obj{"policy": "manual"}})
		require.Equal(t, "manual", requireShape(t, pol, sessionKeys, "session")["policy"])

		// Posture follows the session into the runs it starts (SPEC §3):
		// manual holds even an auto workflow; yolo holds nothing.
		held := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/workflows/echo-probe/enqueue", key: "steward",
			body: obj{"dedupeKey": "manual-1", "payload": obj{"brief": "b"}, "sessionId": id}})
		require.Equal(t, id, held["item"].(obj)["sessionId"])
		heldRun := a.waitRun(t, held["item"].(obj)["id"].(string), "suspended")
		require.Equal(t, "open", requireShape(t, heldRun["hold"], holdKeys, "hold")["status"])
		summary := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/" + id, key: "viewer"})
		require.Equal(t, float64(1), summary["openHolds"], "the summary counts open holds")
		term := a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/commands", key: "steward", body: obj{"command": "/terminate"}})
		require.Equal(t, float64(1), term["cancelledRuns"], "/terminate cancels the session's active run")
		a.waitRun(t, held["item"].(obj)["id"].(string), "cancelled")
		a.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/sessions/" + id + "/policy", key: "steward", body: obj{"policy": "yolo"}})
		free := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/workflows/draft-memo/enqueue", key: "steward",
			body: obj{"dedupeKey": "yolo-1", "payload": obj{"title": "Free", "brief": "b"}, "sessionId": id}})
		require.Nil(t, a.waitRun(t, free["item"].(obj)["id"].(string), "succeeded")["hold"], "yolo holds nothing")

		for _, tc := range []struct {
			name string
			r    req
			want int
		}{
			{"UnknownID", req{method: http.MethodGet, path: "/api/sessions/ses_nope", key: "viewer"}, http.StatusNotFound},
			{"UnknownEvents", req{method: http.MethodGet, path: "/api/sessions/ses_nope/events", key: "viewer"}, http.StatusNotFound},
			{"UnknownTag", req{method: http.MethodGet, path: "/api/sessions/resolve?tag=acceptance:none", key: "viewer"}, http.StatusNotFound},
			{"ResolveNeedsTag", req{method: http.MethodGet, path: "/api/sessions/resolve", key: "viewer"}, http.StatusBadRequest},
			{"BadAfter", req{method: http.MethodGet, path: "/api/sessions/" + id + "/events?after=yesterday", key: "viewer"}, http.StatusBadRequest},
			{"UnknownCommand", req{method: http.MethodPost, path: "/api/sessions/" + id + "/commands", key: "steward", body: obj{"command": "/frobnicate"}}, http.StatusBadRequest},
			{"CommandUnknownSession", req{method: http.MethodPost, path: "/api/sessions/ses_nope/commands", key: "steward", body: obj{"command": "/status"}}, http.StatusNotFound},
			{"MessageUnknownSession", req{method: http.MethodPost, path: "/api/sessions/ses_nope/messages", key: "steward", body: obj{"text": "hi"}}, http.StatusNotFound},
			{"EmptyMessage", req{method: http.MethodPost, path: "/api/sessions/" + id + "/messages", key: "steward", body: obj{"text": ""}}, http.StatusBadRequest},
			{"BadPolicy", req{method: http.MethodPost, path: "/api/sessions/" + id + "/policy", key: "steward", body: obj{"policy": "wild"}}, http.StatusBadRequest},
			{"BadForkTs", req{method: http.MethodPost, path: "/api/sessions/" + id + "/fork", key: "steward", body: obj{"atTs": "later"}}, http.StatusBadRequest},
			{"ForkUnknownSession", req{method: http.MethodPost, path: "/api/sessions/ses_nope/fork", key: "steward", body: obj{"atTs": first["ts"]}}, http.StatusNotFound},
			{"ArchiveUnknown", req{method: http.MethodPost, path: "/api/sessions/ses_nope/archive", key: "steward"}, http.StatusNotFound},
			{"UnarchiveUnknown", req{method: http.MethodPost, path: "/api/sessions/ses_nope/unarchive", key: "steward"}, http.StatusNotFound},
			{"PolicyUnknown", req{method: http.MethodPost, path: "/api/sessions/ses_nope/policy", key: "steward", body: obj{"policy": "auto"}}, http.StatusNotFound},
			{"ViewerMayNotWrite", req{method: http.MethodPost, path: "/api/sessions", key: "viewer", body: obj{"title": "x"}}, http.StatusForbidden},
			{"NotJSON", req{method: http.MethodPost, path: "/api/sessions", key: "steward", body: `{}`, ctype: "text/plain"}, http.StatusUnsupportedMediaType},
			{"BadJSON", req{method: http.MethodPost, path: "/api/sessions", key: "steward", body: `{"title":1}`}, http.StatusBadRequest},
			{"BadIncludeArchived", req{method: http.MethodGet, path: "/api/sessions?includeArchived=maybe", key: "viewer"}, http.StatusBadRequest},
			{"BadOrigin", req{method: http.MethodGet, path: "/api/sessions?origin=martian", key: "viewer"}, http.StatusBadRequest},
			{"BadCursor", req{method: http.MethodGet, path: "/api/sessions?cursor=garbage", key: "viewer"}, http.StatusBadRequest},
		} {
			t.Run(tc.name, func(t *testing.T) { a.ok(t, tc.want, tc.r) })
		}
	})

	t.Run("SessionListPaged", func(t *testing.T) {
		for i := range 3 {
			s := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/sessions", key: "steward", body: obj{"title": "pageprobe " + string(rune('a'+i))}})
			a.ok(t, http.StatusAccepted, req{method: http.MethodPost, path: "/api/sessions/" + s["id"].(string) + "/messages", key: "steward", body: obj{"text": "hi"}})
		}
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			out := a.ok(t, http.StatusOK, req{method: http.MethodGet, key: "viewer",
				path: "/api/sessions?origin=api,user&includeArchived=true&q=pageprobe&limit=2&cursor=" + url.QueryEscape(cursor)})
			require.Contains(t, out, "next", "paged lists carry next")
			for _, s := range requireList(t, out, "sessions") {
				o := requireShape(t, s, sessionKeys, "listed session")
				require.False(t, seen[o["id"].(string)], "pages do not overlap")
				seen[o["id"].(string)] = true
			}
			pages++
			cursor = out["next"].(string)
			if cursor == "" {
				break
			}
			require.Less(t, pages, 5)
		}
		require.Len(t, seen, 3)
		require.Equal(t, 2, pages, "next is empty on the last page")
		def := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions?q=pageprobe", key: "viewer"})
		require.Empty(t, requireList(t, def, "sessions"), "the default origin filter is user and channel; these are api sessions")
	})

	t.Run("Internal", func(t *testing.T) {
		for _, tc := range []struct {
			name, method, path, key string
			want                    int
		}{
			{"SessionsNoKey", http.MethodPost, "/api/internal/sessions", "", http.StatusUnauthorized},
			{"SessionsWrongKey", http.MethodPost, "/api/internal/sessions", "wrong", http.StatusUnauthorized},
			{"CronNoKey", http.MethodGet, "/api/internal/cron/run-workflows", "", http.StatusUnauthorized},
			{"CronWrongKey", http.MethodGet, "/api/internal/cron/run-workflows", "wrong", http.StatusUnauthorized},
			{"APIKeyIsNotInternalKey", http.MethodGet, "/api/internal/cron/run-workflows", "", http.StatusUnauthorized},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := req{method: tc.method, path: tc.path, header: map[string]string{}}
				if tc.method == http.MethodPost {
					r.body = obj{"purpose": "p"}
				}
				if tc.key != "" {
					r.header["x-internal-key"] = tc.key
				}
				if tc.name == "APIKeyIsNotInternalKey" {
					r.key = "admin"
				}
				a.ok(t, tc.want, r)
			})
		}
		in := map[string]string{"x-internal-key": acceptanceInternalKey}
		// The agent names its API key beside the internal key, so the session
		// is that key's: only it (or an admin) may stamp the session (SPEC §3).
		agent := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/internal/sessions", header: in, key: "viewer",
			body: obj{"purpose": "acceptance agent"}})
		requireShape(t, agent, sessionKeys, "agent session")
		require.Equal(t, "agent", agent["origin"])
		id := agent["id"].(string)
		a.ok(t, http.StatusBadRequest, req{method: http.MethodPost, path: "/api/internal/sessions", header: in, body: `{"purpose":`})

		a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/workflows", key: "viewer", header: map[string]string{"X-Holdfast-Session": id}})
		a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/runs", key: "viewer", header: map[string]string{"X-Holdfast-Session": id}})
		a.ok(t, http.StatusNotFound, req{method: http.MethodGet, path: "/api/runs", key: "viewer", header: map[string]string{"X-Holdfast-Session": "ses_nope"}})
		a.ok(t, http.StatusForbidden, req{method: http.MethodGet, path: "/api/runs", key: "steward", header: map[string]string{"X-Holdfast-Session": id}})
		got := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/sessions/" + id, key: "viewer"})
		require.GreaterOrEqual(t, got["requestCount"], float64(2), "tracked requests count against the session")

		cron := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/internal/cron/run-workflows", header: in})
		requireShape(t, cron, cronKeys, "cron pass")
	})

	t.Run("CookieAuthWithCSRF", func(t *testing.T) {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		c := &acc{url: a.url, keys: map[string]string{}, http: &http.Client{Jar: jar,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
		page := func(path string) string {
			resp, err := c.http.Get(c.url + path)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return string(b)
		}
		m := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(page("/login"))
		require.NotNil(t, m, "the sign-in form carries a CSRF token")
		form := url.Values{"csrf_token": {m[1]}, "username": {"stella"}, "password": {"steward-password"}}
		hr, err := http.NewRequest(http.MethodPost, c.url+"/login", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		hr.Header.Set("Origin", c.url)
		resp, err := c.http.Do(hr)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed in")
		tok := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`).FindStringSubmatch(page("/sessions"))
		require.NotNil(t, tok)

		requireList(t, c.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds"}), "holds")
		c.ok(t, http.StatusForbidden, req{method: http.MethodPost, path: "/api/sessions", body: obj{"title": "no token"}})
		c.ok(t, http.StatusForbidden, req{method: http.MethodPost, path: "/api/sessions", body: obj{"title": "cross site"},
			header: map[string]string{"X-CSRF-Token": tok[1], "Sec-Fetch-Site": "cross-site"}})
		s := c.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/sessions", body: obj{"title": "with token"},
			header: map[string]string{"X-CSRF-Token": tok[1]}})
		require.Equal(t, "user", requireShape(t, s, sessionKeys, "session")["origin"], "a person's console session has origin user")

		// A steward signed in to the console decides through the API too.
		q := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/workflows/draft-memo/enqueue", key: "admin",
			body: obj{"dedupeKey": "cookie-1", "payload": obj{"title": "Cookie", "brief": "b"}}})
		holdID := requireShape(t, a.waitRun(t, q["item"].(obj)["id"].(string), "suspended")["hold"], holdKeys, "hold")["id"].(string)
		c.ok(t, http.StatusForbidden, req{method: http.MethodPost, path: "/api/holds/" + holdID + "/decision", body: obj{"decision": "reject"}})
		h := c.ok(t, http.StatusOK, req{method: http.MethodPost, path: "/api/holds/" + holdID + "/decision", body: obj{"decision": "reject", "comment": "no"},
			header: map[string]string{"X-CSRF-Token": tok[1]}})
		require.Equal(t, "rejected", h["status"])
		require.Equal(t, "console", h["decidedVia"])
		a.waitRun(t, q["item"].(obj)["id"].(string), "cancelled")

		// Console forms post to their page: POST /holds/{id}/decision with
		// decision, comment and output, CSRF-protected like every form.
		q2 := a.ok(t, http.StatusCreated, req{method: http.MethodPost, path: "/api/workflows/draft-memo/enqueue", key: "admin",
			body: obj{"dedupeKey": "cookie-2", "payload": obj{"title": "Form", "brief": "b"}}})
		hold2 := requireShape(t, a.waitRun(t, q2["item"].(obj)["id"].(string), "suspended")["hold"], holdKeys, "hold")["id"].(string)
		postForm := func(form url.Values) int {
			hr, err := http.NewRequest(http.MethodPost, c.url+"/holds/"+hold2+"/decision", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			hr.Header.Set("Origin", c.url)
			resp, err := c.http.Do(hr)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Equal(t, http.StatusForbidden, postForm(url.Values{"decision": {"approve"}}), "a form without its CSRF token is refused")
		require.Equal(t, "open", a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds/" + hold2, key: "viewer"})["status"])
		status := postForm(url.Values{"csrf_token": {tok[1]}, "decision": {"approve"}, "comment": {"edited"}, "output": {"# Form\n\nEdited by a steward."}})
		require.Less(t, status, 400, "the form decision is accepted")
		decided := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/holds/" + hold2, key: "viewer"})
		require.Equal(t, "approved", decided["status"])
		require.Equal(t, "console", decided["decidedVia"])
		done := a.waitRun(t, q2["item"].(obj)["id"].(string), "succeeded")
		memo := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos/" + done["dispatch"].(obj)["memoId"].(string), key: "viewer"})
		require.Contains(t, memo["body"], "Edited by a steward.", "the edited output is what is dispatched")
	})
}

// With no HOLDFAST_INTERNAL_KEY the internal routes do not exist and
// /metrics is open (SPEC §1, §7).
func TestAcceptanceNoInternalKey(t *testing.T) {
	t.Parallel()
	a := setupAcceptance(t, "")
	for _, tc := range []struct {
		name string
		r    req
		want int
	}{
		{"InternalSessions", req{method: http.MethodPost, path: "/api/internal/sessions", body: obj{"purpose": "p"}}, http.StatusNotFound},
		{"InternalSessionsWithAKey", req{method: http.MethodPost, path: "/api/internal/sessions", body: obj{"purpose": "p"},
			header: map[string]string{"x-internal-key": "anything"}}, http.StatusNotFound},
		{"Cron", req{method: http.MethodGet, path: "/api/internal/cron/run-workflows"}, http.StatusNotFound},
		{"CronWithAKey", req{method: http.MethodGet, path: "/api/internal/cron/run-workflows", header: map[string]string{"x-internal-key": "anything"}}, http.StatusNotFound},
		{"Metrics", req{method: http.MethodGet, path: "/metrics"}, http.StatusOK},
		{"Healthz", req{method: http.MethodGet, path: "/healthz"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) { a.ok(t, tc.want, tc.r) })
	}
}

// TestAcceptanceCLIEnqueue enqueues with `bot enqueue` against a running
// service, which picks the item up on a cron pass.
func TestAcceptanceCLIEnqueue(t *testing.T) {
	t.Parallel()
	a := setupAcceptance(t, acceptanceInternalKey)
	itemRe := regexp.MustCompile(`item (itm_\S+)`)

	out := a.cli(t, "", "enqueue", "/echo-probe", "--dedupe", "cli-1", "--payload", `{"brief":"from the command line"}`)
	require.Contains(t, out, "enqueued")
	m := itemRe.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	again := a.cli(t, "", "enqueue", "echo-probe", "--dedupe", "cli-1", "--payload", `{"brief":"ignored"}`)
	require.Contains(t, again, "already enqueued", "the leading slash is optional and the dedupe key makes it idempotent")
	require.Equal(t, m[1], itemRe.FindStringSubmatch(again)[1])

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"NoDedupe", []string{"enqueue", "/echo-probe"}, "--dedupe"},
		{"NoCommand", []string{"enqueue", "--dedupe", "k"}, "usage"},
		{"PayloadNotObject", []string{"enqueue", "/echo-probe", "--dedupe", "k", "--payload", "[1]"}, "JSON object"},
		{"PayloadNotJSON", []string{"enqueue", "/echo-probe", "--dedupe", "k", "--payload", "{"}, "JSON object"},
		{"UnknownCommand", []string{"enqueue", "/nope", "--dedupe", "k"}, "not found"},
		{"NotLive", []string{"enqueue", "/paused-probe", "--dedupe", "k"}, "live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, a.env, "", tc.args...)
			require.ErrorContains(t, err, tc.wantErr, out)
		})
	}

	// Import takes files as well as directories, and matches by command:
	// a retitled file updates the workflow it names.
	f := filepath.Join(a.dir, "echo-v2.md")
	require.NoError(t, os.WriteFile(f, []byte(strings.Replace(strings.Replace(echoWorkflow, "# Echo probe", "# Echo probe, retitled", 1),
		"Echoes the brief into a memo", "Echoes the brief, version two", 1)), 0o600))
	out = a.cli(t, "", "workflow", "import", f)
	require.Contains(t, out, "updated")
	wfs := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/workflows", key: "viewer"})
	n := 0
	for _, w := range requireList(t, wfs, "workflows") {
		if o := w.(obj); o["command"] == "/echo-probe" {
			n++
			require.Equal(t, "Echoes the brief, version two", o["summary"])
		}
	}
	require.Equal(t, 1, n, "one workflow per command")

	item := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/queue/" + m[1], key: "viewer"})
	requireShape(t, item, itemKeys, "item")
	require.Equal(t, "cli-1", item["dedupeKey"])

	in := map[string]string{"x-internal-key": acceptanceInternalKey}
	requireShape(t, a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/internal/cron/run-workflows", header: in}), cronKeys, "cron pass")
	run := a.waitRun(t, m[1], "succeeded")
	requireShape(t, run, runKeys, "run")
	require.Nil(t, run["hold"], "an auto workflow holds nothing")
	require.Equal(t, "1m30s", run["manifest"].(obj)["policy"].(obj)["timeout"])
	memo := a.ok(t, http.StatusOK, req{method: http.MethodGet, path: "/api/memos/" + requireShape(t, run["dispatch"], []string{"memoId"}, "dispatch")["memoId"].(string), key: "viewer"})
	require.Contains(t, memo["body"], "from the command line")
	requireShape(t, memo, memoKeys, "dispatched memo")
}

// TestAcceptanceConfig checks SPEC §1's table: every env var has a flag of
// the same meaning, and a flag wins over its env var.
func TestAcceptanceConfig(t *testing.T) {
	t.Parallel()
	var c config
	flags := map[string]string{}
	for _, s := range c.settings() {
		flags[s.env] = s.flag
	}
	for _, env := range []string{"HOLDFAST_ADDR", "HOLDFAST_DB", "HOLDFAST_BASE_URL", "HOLDFAST_INTERNAL_KEY", "HOLDFAST_ADMIN_PASSWORD",
		"HOLDFAST_DB_SYNC", "HOLDFAST_DEFAULT_POLICY", "HOLDFAST_STUCK_RUN", "HOLDFAST_MAX_RECOVERY", "HOLDFAST_PASS_INTERVAL",
		"HOLDFAST_WORKERS", "HOLDFAST_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
		"SLACK_SIGNING_SECRET", "SLACK_API_URL", "SLACK_STEWARDS", "SLACK_HOLDS_CHANNEL"} {
		want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "HOLDFAST_")), "_", "-")
		require.Equalf(t, want, flags[env], "%s has the flag --%s", env, want)
	}

	dir := t.TempDir()
	envDB, flagDB := filepath.Join(dir, "env.db"), filepath.Join(dir, "flag.db")
	out, err := runCLI(t, map[string]string{"HOLDFAST_DB": envDB}, "", "migrate", "--db", flagDB)
	require.NoError(t, err, out)
	require.Contains(t, out, flagDB, "the flag wins over the env var")
	require.FileExists(t, flagDB)
	require.NoFileExists(t, envDB)

	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"BadPolicy", map[string]string{"HOLDFAST_DEFAULT_POLICY": "reckless"}, "policy"},
		{"BadDuration", map[string]string{"HOLDFAST_STUCK_RUN": "soon"}, "HOLDFAST_STUCK_RUN"},
		{"BadModel", map[string]string{"HOLDFAST_MODEL": "gpt"}, "model"},
		{"SlackHTTPNeedsSecret", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["HOLDFAST_DB"] = filepath.Join(dir, tc.name+".db")
			_, err := runCLI(t, tc.env, "", "migrate")
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
