package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

const internalKey = "internal-test-key"

// engineSetup serves the real router with an engine that is not started:
// tests drive it one pass at a time through the cron route, so every
// answer is deterministic.
func engineSetup(t *testing.T, key string) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lib := library.New(db, log)
	require.NoError(t, lib.SeedExamples(ctx))
	b := &testBundle{db: db, keys: map[string]string{}}
	// Keys are named by role; "steward2" is a second steward, another
	// identity with the same rights.
	for _, name := range []string{store.RoleViewer, store.RoleSteward, store.RoleAdmin, "steward2"} {
		role := strings.TrimSuffix(name, "2")
		k, hash := auth.NewAPIKey()
		_, err := db.APIKeyCreate(ctx, &store.APIKey{Name: name, Role: role, KeyHash: hash})
		require.NoError(t, err)
		b.keys[name] = k
	}
	models := model.NewRegistry("template", model.Config{})
	eng := engine.New(engine.Config{Workers: 2, DisableScheduler: true}, db, models, log)
	svc := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: models, DefaultModel: "template"}, eng, log)
	t.Cleanup(svc.Close)
	b.srv = httptest.NewServer(server.Handler(server.Deps{
		Store:       db,
		API:         api.New(api.Deps{Store: db, Library: lib, Log: log, Engine: eng, Sessions: svc, InternalKey: key}),
		Metrics:     promhttp.HandlerFor(eng.Registry(), promhttp.HandlerOpts{}),
		InternalKey: key,
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *testBundle) cron(t *testing.T, key string, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/api/internal/cron/run-workflows", nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("x-internal-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, jsonDecode(resp.Body, out))
	}
	return resp.StatusCode
}

type enqueueAnswer struct {
	Enqueued bool
	Item     struct {
		ID, WorkflowMemoID, Command, DedupeKey, Status, RunID, SessionID, CreatedAt string
	}
}

type errAnswer struct {
	Error struct{ Code, Message string }
}

func TestEnqueueRoute(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	body := map[string]any{"dedupeKey": "k1", "payload": map[string]any{"title": "T", "brief": "b"}}

	var first, again enqueueAnswer
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue", body, &first))
	require.True(t, first.Enqueued)
	require.Equal(t, "/draft-memo", first.Item.Command)
	require.Equal(t, "pending", first.Item.Status)
	require.NotEmpty(t, first.Item.SessionID)
	require.Equal(t, http.StatusOK, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue", body, &again))
	require.False(t, again.Enqueued)
	require.Equal(t, first.Item.ID, again.Item.ID)

	var got map[string]any
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/queue/"+first.Item.ID, nil, &got))
	require.Equal(t, first.Item.ID, got["id"])

	w, err := b.db.WorkflowGetByCommand(context.Background(), "/weekly-digest")
	require.NoError(t, err)
	_, err = b.db.WorkflowStatusSet(context.Background(), w.MemoID, "paused")
	require.NoError(t, err)

	for _, c := range []struct {
		name, role, path, ctype, body string
		want                          int
	}{
		{"NoCredentials", "", "/api/workflows/draft-memo/enqueue", "application/json", `{"dedupeKey":"x"}`, http.StatusUnauthorized},
		{"ViewerMayNotEnqueue", store.RoleViewer, "/api/workflows/draft-memo/enqueue", "application/json", `{"dedupeKey":"x"}`, http.StatusForbidden},
		{"NotJSON", store.RoleSteward, "/api/workflows/draft-memo/enqueue", "text/plain", `{"dedupeKey":"x"}`, http.StatusUnsupportedMediaType},
		{"MalformedJSON", store.RoleSteward, "/api/workflows/draft-memo/enqueue", "application/json", `{"dedupeKey":`, http.StatusBadRequest},
		{"UnknownField", store.RoleSteward, "/api/workflows/draft-memo/enqueue", "application/json", `{"dedupeKey":"x","bogus":1}`, http.StatusBadRequest},
		{"MissingDedupeKey", store.RoleSteward, "/api/workflows/draft-memo/enqueue", "application/json", `{"payload":{}}`, http.StatusBadRequest},
		{"UnknownCommand", store.RoleSteward, "/api/workflows/nope/enqueue", "application/json", `{"dedupeKey":"x"}`, http.StatusNotFound},
		{"NotLive", store.RoleSteward, "/api/workflows/weekly-digest/enqueue", "application/json", `{"dedupeKey":"x"}`, http.StatusConflict},
		{"UnknownSession", store.RoleSteward, "/api/workflows/draft-memo/enqueue", "application/json", `{"dedupeKey":"y","sessionId":"ses_nope"}`, http.StatusNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			var e errAnswer
			require.Equal(t, c.want, b.do(t, c.role, http.MethodPost, c.path, c.ctype, strings.NewReader(c.body), &e))
			require.NotEmpty(t, e.Error.Message)
		})
	}
	var e errAnswer
	require.Equal(t, http.StatusNotFound, b.json(t, store.RoleViewer, http.MethodGet, "/api/queue/itm_nope", nil, &e))
	pending, err := b.db.QueueItemCountPending(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), pending, "refused enqueues changed nothing")
}

func TestCronRoute(t *testing.T) {
	t.Parallel()
	t.Run("NoKeyConfiguredIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := engineSetup(t, "")
		require.Equal(t, http.StatusNotFound, b.cron(t, "anything", nil))
	})
	b := engineSetup(t, internalKey)
	require.Equal(t, http.StatusUnauthorized, b.cron(t, "", nil))
	require.Equal(t, http.StatusUnauthorized, b.cron(t, "wrong", nil))
	var res engine.PassResult
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
	require.Equal(t, engine.PassResult{}, res, "an empty queue does nothing")

	for _, k := range []string{"a", "b"} {
		require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/summarize-thread/enqueue",
			map[string]any{"dedupeKey": k, "payload": map[string]any{"brief": "x"}}, nil))
	}
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
	require.Equal(t, engine.PassResult{Pending: 2, Started: 2, FailedItems: 2}, res, "reply without a Slack thread fails `dispatch`")
}

type runAnswer struct {
	ID, ItemID, Command, SessionID, Status, ErrorKind, Error string
	Steps                                                    []struct {
		Kind, Status, StartedAt, ErrorKind, Error string
		DurationMs, TokensIn, TokensOut           int
	}
	Guards           []map[string]any
	Hold             *struct{ ID, Status, GateLabel string }
	Dispatch         *struct{ MemoID string }
	RecoveryAttempts int
	Decisions        []struct{ Outcome, DecidedBy string }
}

type holdAnswer struct {
	ID, RunID, Command, GateLabel, Status, Preview, DecidedBy, DecidedVia, Comment string
	Approvals                                                                      []map[string]any
	DecidedAt                                                                      *string
	Decisions                                                                      []struct{ Outcome, Reason string }
}

func TestRunsAndHoldsRoutes(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	var enq enqueueAnswer
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
		map[string]any{"dedupeKey": "k", "payload": map[string]any{"title": "Herons", "brief": "Herons wait."}}, &enq))
	var res engine.PassResult
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
	require.Equal(t, 1, res.Started)

	var runs struct{ Runs []runAnswer }
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs?status=suspended", nil, &runs))
	require.Len(t, runs.Runs, 1)
	run := runs.Runs[0]
	require.Equal(t, enq.Item.ID, run.ItemID)
	require.Nil(t, run.Dispatch, "dispatch is null until dispatched")
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs?status=succeeded", nil, &runs))
	require.Empty(t, runs.Runs)
	var e errAnswer
	require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs?status=bogus", nil, &e))
	// A search that cannot be text (SPEC §7) is refused on every listing,
	// never answered with the unfiltered list or with nothing.
	for _, path := range []string{"/api/runs?q=%ff", "/api/memos?q=%ff%fe", "/api/sessions?q=a%00b"} {
		require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, path, nil, &e), path)
		require.True(t, strings.HasPrefix(e.Error.Message, `query parameter "q"`), "%s: a sentence, no error kind before it: %s", path, e.Error.Message)
	}
	require.Equal(t, http.StatusNotFound, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs/run_nope", nil, &e))

	var holds struct{ Holds []holdAnswer }
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds?status=open", nil, &holds))
	require.Len(t, holds.Holds, 1)
	h := holds.Holds[0]
	require.Equal(t, run.ID, h.RunID)
	require.Equal(t, "/draft-memo", h.Command)
	require.Equal(t, "Review draft", h.GateLabel)
	require.Contains(t, h.Preview, "Herons wait.")
	require.Nil(t, h.DecidedAt)
	require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds?status=bogus", nil, &e))
	require.Equal(t, http.StatusNotFound, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds/hld_nope", nil, &e))

	decide := "/api/holds/" + h.ID + "/decision"
	require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleAdmin, http.MethodPost, decide, map[string]any{"decision": "maybe"}, &e))
	require.Equal(t, http.StatusUnsupportedMediaType, b.do(t, store.RoleAdmin, http.MethodPost, decide, "text/plain", strings.NewReader(`{"decision":"approve"}`), &e))
	require.Equal(t, http.StatusForbidden, b.json(t, store.RoleViewer, http.MethodPost, decide, map[string]any{"decision": "approve"}, &e))
	require.Equal(t, http.StatusForbidden, b.json(t, store.RoleSteward, http.MethodPost, decide, map[string]any{"decision": "approve"}, &e))
	require.Contains(t, e.Error.Message, "may not approve", "the key that enqueued may not approve its own run")
	require.Equal(t, http.StatusNotFound, b.json(t, store.RoleAdmin, http.MethodPost, "/api/holds/hld_nope/decision", map[string]any{"decision": "approve"}, &e))

	var decided holdAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleAdmin, http.MethodPost, decide, map[string]any{"decision": "approve", "comment": "fine"}, &decided))
	require.Equal(t, "approved", decided.Status)
	require.Equal(t, "api", decided.DecidedVia)
	require.Equal(t, "fine", decided.Comment)
	require.Equal(t, "API key “admin”", decided.DecidedBy, "a key is named by its name, not its id")
	require.NotNil(t, decided.DecidedAt)
	require.Equal(t, http.StatusConflict, b.json(t, store.RoleAdmin, http.MethodPost, decide, map[string]any{"decision": "reject"}, &e))
	require.Contains(t, e.Error.Message, decided.DecidedBy, "the conflict names who decided")

	require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
	require.Equal(t, 1, res.Resumed)
	var full runAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs/"+run.ID, nil, &full))
	require.Equal(t, "succeeded", full.Status)
	require.NotNil(t, full.Dispatch)
	require.NotEmpty(t, full.Dispatch.MemoID)
	require.Len(t, full.Steps, 4)
	require.Equal(t, "context", full.Steps[0].Kind)
	require.NotEmpty(t, full.Steps[0].StartedAt)
	require.NotEmpty(t, full.Guards)
	require.NotNil(t, full.Hold)
	require.Equal(t, "approved", full.Hold.Status)
	require.Len(t, full.Decisions, 4, "every attempt that reached the hold is audited: 2 refused, 1 accepted, 1 conflict")

	var memo store.Memo
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos/"+full.Dispatch.MemoID, nil, &memo))
	require.Equal(t, "Herons", memo.Title)

	var detail holdAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds/"+h.ID, nil, &detail))
	require.Len(t, detail.Decisions, 4)
	require.Equal(t, "refused", detail.Decisions[0].Outcome)
}

func TestRunsAndHoldsPaging(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	const n = 5
	for i := range n {
		require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
			map[string]any{"dedupeKey": fmt.Sprint("k", i), "payload": map[string]any{"title": "Herons", "brief": "Herons wait."}}, nil))
	}
	started := 0
	for pass := 0; pass < n && started < n; pass++ { // a pass starts at least one pending item
		var res engine.PassResult
		require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
		started += res.Started
	}
	require.Equal(t, n, started)

	type runPage struct {
		Runs []runAnswer
		Next *string
	}
	type holdPage struct {
		Holds []holdAnswer
		Next  *string
	}
	var all runPage
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs?status=suspended", nil, &all))
	require.Len(t, all.Runs, n)
	require.NotNil(t, all.Next, "a paged list always answers next")
	require.Empty(t, *all.Next, "one page holds them all")

	// Walking pages of 2 shows every run once, in the single page's order.
	for _, path := range []string{"/api/runs?status=suspended&limit=2", "/api/runs?limit=2"} {
		var ids []string
		pages := 0
		for next := ""; ; {
			var p runPage
			u := path
			if next != "" {
				u += "&cursor=" + url.QueryEscape(next)
			}
			require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, u, nil, &p))
			pages++
			for _, r := range p.Runs {
				ids = append(ids, r.ID)
			}
			require.NotNil(t, p.Next)
			if next = *p.Next; next == "" {
				break
			}
			require.Len(t, p.Runs, 2, "only the last page is short")
		}
		require.Equal(t, 3, pages, path)
		var want []string
		for _, r := range all.Runs {
			want = append(want, r.ID)
		}
		require.Equal(t, want, ids, path)
	}

	var open holdPage
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds?status=open", nil, &open))
	require.Len(t, open.Holds, n)
	var first, second holdPage
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds?status=open&limit=3", nil, &first))
	require.Len(t, first.Holds, 3)
	require.NotEmpty(t, *first.Next)
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/holds?status=open&limit=3&cursor="+url.QueryEscape(*first.Next), nil, &second))
	require.Len(t, second.Holds, 2)
	require.Empty(t, *second.Next)
	require.Equal(t, open.Holds, append(first.Holds, second.Holds...), "the steward queue pages oldest first")

	for _, path := range []string{
		"/api/runs?cursor=nonsense", "/api/runs?limit=0", "/api/runs?limit=201", "/api/runs?limit=ten",
		"/api/holds?status=open&cursor=" + url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte("yesterday|hld_x"))),
		"/api/holds?limit=-1",
	} {
		var e errAnswer
		require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, path, nil, &e), path)
		require.Equal(t, "bad_request", e.Error.Code, path)
		require.NotEmpty(t, e.Error.Message, path)
	}
}

func TestMetricsRoute(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
		map[string]any{"dedupeKey": "k", "payload": map[string]any{"brief": "b"}}, nil))
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, nil))

	get := func(auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/metrics", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	code, _ := get("")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("Bearer " + internalKey + "x")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("bearer " + internalKey)
	require.Equal(t, http.StatusOK, code, "the scheme is case-insensitive (RFC 9110)")
	code, text := get("Bearer " + internalKey)
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`holdfast_queue_items{status="claimed"} 1`,
		`holdfast_runs{status="suspended"} 1`,
		`holdfast_holds_open 1`,
		`holdfast_step_duration_seconds_bucket{kind="process"`,
		`holdfast_run_recoveries_total 0`,
	} {
		require.Contains(t, text, want)
	}
}

func jsonDecode(r io.Reader, out any) error { return json.NewDecoder(r).Decode(out) }

// TestRunFiltersRerunAndCancel: GET /api/runs filters by status, workflow,
// session and text; a steward re-runs a settled run (201 {item}, dedupe key
// rerun:<runId>:<n>) and cancels a held one (200 run, rejected as a
// decision); viewers are refused.
func TestRunFiltersRerunAndCancel(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	var otters, herons, digest enqueueAnswer
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
		map[string]any{"dedupeKey": "o", "payload": map[string]any{"title": "Otter census", "brief": "Count them."}}, &otters))
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
		map[string]any{"dedupeKey": "h", "payload": map[string]any{"brief": "Heron nests\nby the river"}}, &herons))
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/weekly-digest/enqueue",
		map[string]any{"dedupeKey": "d", "payload": map[string]any{"title": "Digest about otters"}}, &digest))
	var res engine.PassResult
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, &res))
	require.Equal(t, 3, res.Started)

	type runPage struct {
		Runs []struct {
			runAnswer
			Title string
		}
	}
	list := func(query string) []string {
		t.Helper()
		var p runPage
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/runs?"+query, nil, &p), query)
		out := []string{}
		for _, r := range p.Runs {
			out = append(out, r.Title)
		}
		// One pass claims all three in one transaction: equal creation
		// times, whose id tie-break orders them arbitrarily.
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"Digest about otters", "Heron nests", "Otter census"}},
		{"workflow=draft-memo", []string{"Heron nests", "Otter census"}},
		{"workflow=%2Fweekly-digest", []string{"Digest about otters"}},
		{"q=otter", []string{"Digest about otters", "Otter census"}},
		{"q=RIVER", []string{"Heron nests"}},
		{"q=otter&workflow=draft-memo&status=suspended", []string{"Otter census"}},
		{"status=succeeded&q=otter", []string{"Digest about otters"}},
		{"sessionId=" + herons.Item.SessionID, []string{"Heron nests"}},
		{"q=zebra", []string{}},
		{"q=" + url.QueryEscape(`"); DROP TABLE x; --`), []string{}},
	} {
		require.Equal(t, tc.want, list(tc.query), tc.query)
	}

	digestRun := store.RunIDForItem(digest.Item.ID)
	var e errAnswer
	require.Equal(t, http.StatusForbidden, b.json(t, store.RoleViewer, http.MethodPost, "/api/runs/"+digestRun+"/rerun", nil, &e))
	require.Contains(t, e.Error.Message, "not a steward")
	var again struct{ Item enqueueAnswer }
	var rerun struct {
		Item struct{ ID, DedupeKey, Status, SessionID, Command string }
	}
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/runs/"+digestRun+"/rerun", nil, &rerun))
	require.Equal(t, "rerun:"+digestRun+":1", rerun.Item.DedupeKey)
	require.Equal(t, "pending", rerun.Item.Status)
	require.Equal(t, digest.Item.SessionID, rerun.Item.SessionID)
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/runs/"+digestRun+"/rerun", nil, &again))
	require.Equal(t, http.StatusNotFound, b.json(t, store.RoleSteward, http.MethodPost, "/api/runs/run_nope/rerun", nil, &e))

	heldRun := store.RunIDForItem(herons.Item.ID)
	require.Equal(t, http.StatusConflict, b.json(t, store.RoleSteward, http.MethodPost, "/api/runs/"+heldRun+"/rerun", nil, &e),
		"a run still waiting cannot be re-run")
	require.Equal(t, http.StatusForbidden, b.json(t, store.RoleViewer, http.MethodPost, "/api/runs/"+heldRun+"/cancel", nil, &e))
	var cancelled runAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleAdmin, http.MethodPost, "/api/runs/"+heldRun+"/cancel", nil, &cancelled))
	require.Equal(t, "cancelled", cancelled.Status)
	require.Contains(t, cancelled.Error, "rejected by")
	require.Equal(t, "rejected", cancelled.Hold.Status)
	require.Equal(t, http.StatusConflict, b.json(t, store.RoleAdmin, http.MethodPost, "/api/runs/"+heldRun+"/cancel", nil, &e))
}
