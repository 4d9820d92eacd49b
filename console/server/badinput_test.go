package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/store"
)

// fixture is what the bad-input cases aim at: ids substituted for {memo},
// {hold}, {run}, {item}, {session} and {agent} in paths and bodies.
type fixture struct {
	ids map[string]string
}

func (f *fixture) expand(s string) string {
	for k, v := range f.ids {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// setupFixture creates a memo, a run waiting on an open hold, a steward's
// session, an agent session owned by the steward key, and pauses
// /weekly-digest, all through the API.
func setupFixture(t *testing.T, s *stack) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{ids: map[string]string{}}
	jsonBody := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	post := func(as, path string, v any, want int, header map[string]string) map[string]any {
		t.Helper()
		res := s.do(t, nil, request{method: http.MethodPost, path: path, as: as, contentType: "application/json", body: jsonBody(v), header: header})
		require.Equal(t, want, res.status, string(res.body))
		out := map[string]any{}
		require.NoError(t, json.Unmarshal(res.body, &out))
		return out
	}
	f.ids["memo"] = post(store.RoleSteward, "/api/memos", map[string]any{"title": "Fixture memo", "body": "A memo the cases aim at."}, 201, nil)["id"].(string)
	f.ids["session"] = post(store.RoleSteward, "/api/sessions", map[string]any{"title": "Fixture session"}, 201, nil)["id"].(string)
	f.ids["agent"] = post(store.RoleSteward, "/api/internal/sessions", map[string]any{"purpose": "fixture agent"}, 201,
		map[string]string{"x-internal-key": internalKey})["id"].(string)
	item := post(store.RoleAdmin, "/api/workflows/draft-memo/enqueue", map[string]any{"dedupeKey": "fixture",
		"payload": map[string]any{"title": "Fixture draft", "brief": "held for the cases"}}, 201, nil)["item"].(map[string]any)
	f.ids["item"] = item["id"].(string)
	res, err := s.eng.RunPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Started)
	holds, err := s.db.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen})
	require.NoError(t, err)
	require.Len(t, holds, 1)
	f.ids["hold"], f.ids["run"] = holds[0].ID, holds[0].RunID
	w, err := s.db.WorkflowGetByCommand(ctx, "/weekly-digest")
	require.NoError(t, err)
	_, err = s.db.WorkflowStatusSet(ctx, w.MemoID, "paused")
	require.NoError(t, err)
	return f
}

// fingerprint is everything a refused request must leave as it was: the
// memo library, sessions (their events, request counts, archive flags and
// postures), probe tags, queue, runs, holds and their audit logs, users,
// workflows and the Slack inbox.
func (s *stack) fingerprint(t *testing.T, f *fixture, probeTags []string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	memos, err := s.db.MemoSearch(ctx, &store.MemoSearchParams{IncludeUnlisted: true, Limit: 500})
	require.NoError(t, err)
	for _, m := range memos {
		fmt.Fprintf(&b, "memo %s v%d %s %q %v\n", m.ID, m.ContentVersion, m.ContentHash, m.Title, m.Tags)
	}
	ses, err := s.db.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginChannel, store.OriginUser,
		store.OriginWorkflow, store.OriginAPI, store.OriginAgent}, IncludeArchived: true, Limit: 500})
	require.NoError(t, err)
	for _, x := range ses {
		fmt.Fprintf(&b, "session %s e%d r%d %v %s %s\n", x.ID, x.EventCount, x.RequestCount, x.Archived, x.Policy, x.LastActiveAt)
	}
	for _, id := range []string{f.ids["session"], f.ids["agent"]} { // the fixture's own, listed or not
		x, err := s.db.SessionGetByID(ctx, id)
		require.NoError(t, err)
		fmt.Fprintf(&b, "fixture session %s e%d r%d %v %s %q\n", x.ID, x.EventCount, x.RequestCount, x.Archived, x.Policy, x.Title)
	}
	for _, tag := range probeTags {
		_, err := s.db.SessionGetByTag(ctx, tag)
		fmt.Fprintf(&b, "probe %s found=%v\n", tag, err == nil)
	}
	queue, err := s.db.QueueItemCountByStatus(ctx)
	require.NoError(t, err)
	runs, err := s.db.RunCountByStatus(ctx)
	require.NoError(t, err)
	fmt.Fprintf(&b, "queue %v runs %v\n", queue, runs)
	holds, err := s.db.HoldList(ctx, &store.HoldListParams{Limit: 500})
	require.NoError(t, err)
	for _, h := range holds {
		audit, err := s.db.HoldDecisionList(ctx, h.ID)
		require.NoError(t, err)
		fmt.Fprintf(&b, "hold %s %s %d approvals, %d audited\n", h.ID, h.Status, len(h.Approvals), len(audit))
	}
	users, err := s.db.UserList(ctx)
	require.NoError(t, err)
	for _, u := range users {
		fmt.Fprintf(&b, "user %s %s %s\n", u.ID, u.Username, u.Role)
	}
	wfs, err := s.db.WorkflowList(ctx)
	require.NoError(t, err)
	for _, w := range wfs {
		fmt.Fprintf(&b, "workflow %s %s\n", w.Command, w.Status)
	}
	inbox, err := s.db.SlackInboxPending(ctx, 1000)
	require.NoError(t, err)
	fmt.Fprintf(&b, "inbox %d\n", len(inbox))
	return b.String()
}

// badCase is one request and what it must answer.
type badCase struct {
	name string
	r    request
	want int
	// location, when set, is where a redirect must point.
	location string
	// allow, when set, is the Allow header a 405 must carry (RFC 9110
	// §15.5.6: the methods the path does answer).
	allow string
	// changes marks a request that is accepted (or, for a refused
	// decision, audited as SPEC §4.3 asks): its state change is asserted
	// instead of ruled out.
	changes bool
}

// TestBadInput is the bad-input table over the API, the console and the
// Slack HTTP endpoints, through the real router (SPEC §7, §8): no answer is
// a 5xx, each gets the status the spec names, API errors have the
// {error:{code,message}} shape, and a refused request changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	f := setupFixture(t, s)
	steward := s.signIn(t, "steward")
	admin := s.signIn(t, "admin")

	const (
		jsonType = "application/json"
		formType = "application/x-www-form-urlencoded"
	)
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	form := func(kv ...string) []byte {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return []byte(v.Encode())
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	over := long(store.MaxNameChars + 1)
	twoMiB := long(store.MaxRequestBytes)
	staleTS := time.Now().Add(-10 * time.Minute).Unix()
	slackEvent := js(map[string]any{"type": "event_callback", "event_id": "EvBad1", "team_id": "T1",
		"event": map[string]any{"type": "app_mention", "channel": "C1", "user": "U1", "ts": "1700000000.000100", "text": "<@UBOT> help"}})
	internal := map[string]string{"x-internal-key": internalKey}

	cases := []badCase{
		// Search text that is not UTF-8 or holds NUL is 400 (SPEC §7), never a 500.
		{name: "MemoSearchNUL", r: request{method: "GET", path: "/api/memos?q=%00", as: "viewer"}, want: 400},
		{name: "MemoSearchInvalidUTF8", r: request{method: "GET", path: "/api/memos?q=%FF%FE", as: "viewer"}, want: 400},
		{name: "MemoSearchRepeatedTerms", r: request{method: "GET", path: "/api/memos?q=" + strings.Repeat("a+", 15000), as: "viewer"}, want: 200},
		{name: "MemoSearchFTSOperators", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape(`NEAR(a b) AND c* ^d "e OR -f {title}:g`), as: "viewer"}, want: 200},
		{name: "MemoSearchLoneQuote", r: request{method: "GET", path: "/api/memos?q=%22", as: "viewer"}, want: 200},
		{name: "MemoSearchLongTerm", r: request{method: "GET", path: "/api/memos?q=" + long(50000), as: "viewer"}, want: 200},
		{name: "SessionFilterNUL", r: request{method: "GET", path: "/api/sessions?q=%00", as: "viewer"}, want: 400},
		{name: "SessionFilterQuote", r: request{method: "GET", path: "/api/sessions?q=%22%22%22", as: "viewer"}, want: 200},
		{name: "ConsoleMemoSearchNUL", r: request{method: "GET", path: "/memos?q=%00", as: "cookie"}, want: 400},

		// The search grammar: filters with good values are searched, a bad
		// one is a 400 naming it (SPEC §4.1), never a 500.
		{name: "MemoSearchFiltersOnly", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape("tag:brief since:7d"), as: "viewer"}, want: 200},
		{name: "MemoSearchAllFilters", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape(`otters "sandy banks" tag:"needs review" type:any since:2w limit:50`), as: "viewer"}, want: 200},
		{name: "MemoSearchUnknownKeyIsText", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape("title:otters 12:30"), as: "viewer"}, want: 200},
		{name: "MemoSearchEmptyTag", r: request{method: "GET", path: "/api/memos?q=tag:", as: "viewer"}, want: 400},
		{name: "MemoSearchBadSince", r: request{method: "GET", path: "/api/memos?q=since:lately", as: "viewer"}, want: 400},
		{name: "MemoSearchHugeSince", r: request{method: "GET", path: "/api/memos?q=since:99999999999999999999d", as: "viewer"}, want: 400},
		{name: "MemoSearchLimitTooBig", r: request{method: "GET", path: "/api/memos?q=limit:51", as: "viewer"}, want: 400},
		{name: "MemoSearchLimitZero", r: request{method: "GET", path: "/api/memos?q=limit:0", as: "viewer"}, want: 400},
		{name: "MemoSearchUnknownType", r: request{method: "GET", path: "/api/memos?q=type:recipe", as: "viewer"}, want: 400},
		{name: "MemoSearchTwoTypes", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape("type:note type:workflow"), as: "viewer"}, want: 400},
		{name: "MemoSearchTypeAgainstMemoType", r: request{method: "GET", path: "/api/memos?q=type:note&memoType=workflow", as: "viewer"}, want: 400},
		{name: "MemoSearchUnknownMemoType", r: request{method: "GET", path: "/api/memos?memoType=recipe", as: "viewer"}, want: 400},
		{name: "MemoSearchTooManyTags", r: request{method: "GET", path: "/api/memos?q=" + url.QueryEscape(manyTagFilters(store.MaxTags+1)), as: "viewer"}, want: 400},
		{name: "ConsoleMemoSearchFilters", r: request{method: "GET", path: "/memos?type=any&q=" + url.QueryEscape("tag:brief since:7d"), as: "cookie"}, want: 200},
		{name: "ConsoleMemoSearchBadFilter", r: request{method: "GET", path: "/memos?q=since:lately", as: "cookie"}, want: 400},
		{name: "ConsoleMemoSearchBadType", r: request{method: "GET", path: "/memos?type=recipe", as: "cookie"}, want: 400},
		{name: "ConsoleSessionFilterNUL", r: request{method: "GET", path: "/sessions?q=%00", as: "cookie"}, want: 400},
		{name: "ConsoleSessionOriginUnknown", r: request{method: "GET", path: "/sessions?origin=user,robot", as: "cookie"}, want: 400},
		{name: "ConsoleSessionOriginsNone", r: request{method: "GET", path: "/sessions?origin=", as: "cookie"}, want: 200},
		{name: "ConsoleMemosPageNotANumber", r: request{method: "GET", path: "/memos?page=abc", as: "cookie"}, want: 400},
		{name: "ConsoleMemosPageZero", r: request{method: "GET", path: "/memos?page=0", as: "cookie"}, want: 400},

		// Malformed query strings and cursors: 400, never a silent first page.
		{name: "SessionsCursorPercent", r: request{method: "GET", path: "/api/sessions?cursor=%%", as: "viewer"}, want: 400},
		{name: "SessionsCursorGarbage", r: request{method: "GET", path: "/api/sessions?cursor=not-a-cursor", as: "viewer"}, want: 400},
		{name: "RunsCursorPercent", r: request{method: "GET", path: "/api/runs?cursor=%%", as: "viewer"}, want: 400},
		{name: "RunsCursorGarbage", r: request{method: "GET", path: "/api/runs?cursor=%3D%3D", as: "viewer"}, want: 400},
		{name: "HoldsCursorPercent", r: request{method: "GET", path: "/api/holds?cursor=%%", as: "viewer"}, want: 400},
		{name: "MalformedQueryElsewhere", r: request{method: "GET", path: "/api/memos?q=x&%zz", as: "viewer"}, want: 400},
		{name: "ConsoleSessionsCursorPercent", r: request{method: "GET", path: "/sessions?cursor=%%", as: "cookie"}, want: 400},
		{name: "ConsoleSessionsCursorGarbage", r: request{method: "GET", path: "/sessions?cursor=zzz", as: "cookie"}, want: 400},
		{name: "ConsoleRunsCursorPercent", r: request{method: "GET", path: "/runs?cursor=%%", as: "cookie"}, want: 400},

		// Bad enum values and parameters.
		{name: "MemoTypeUnknown", r: request{method: "GET", path: "/api/memos?memoType=poem", as: "viewer"}, want: 400},
		{name: "IncludeUnlistedNotABool", r: request{method: "GET", path: "/api/memos?includeUnlisted=maybe", as: "steward"}, want: 400},
		{name: "ViewerMayNotListUnlisted", r: request{method: "GET", path: "/api/memos?includeUnlisted=true", as: "viewer"}, want: 403},
		{name: "RunStatusUnknown", r: request{method: "GET", path: "/api/runs?status=sleeping", as: "viewer"}, want: 400},
		{name: "RunLimitZero", r: request{method: "GET", path: "/api/runs?limit=0", as: "viewer"}, want: 400},
		{name: "RunLimitHuge", r: request{method: "GET", path: "/api/runs?limit=100000", as: "viewer"}, want: 400},
		{name: "RunLimitNotANumber", r: request{method: "GET", path: "/api/runs?limit=ten", as: "viewer"}, want: 400},
		{name: "HoldStatusUnknown", r: request{method: "GET", path: "/api/holds?status=pending", as: "viewer"}, want: 400},
		{name: "SessionOriginUnknown", r: request{method: "GET", path: "/api/sessions?origin=robot", as: "viewer"}, want: 400},
		{name: "SessionIncludeArchivedNotABool", r: request{method: "GET", path: "/api/sessions?includeArchived=maybe", as: "viewer"}, want: 400},
		{name: "SessionLimitNegative", r: request{method: "GET", path: "/api/sessions?limit=-1", as: "viewer"}, want: 400},
		{name: "SessionLimitHuge", r: request{method: "GET", path: "/api/sessions?limit=1000000", as: "viewer"}, want: 400},
		{name: "EventsAfterNotATime", r: request{method: "GET", path: "/api/sessions/{agent}/events?after=yesterday", as: "viewer"}, want: 400},
		{name: "EventsLimitZero", r: request{method: "GET", path: "/api/sessions/{agent}/events?limit=0", as: "viewer"}, want: 400},
		{name: "ResolveWithoutTag", r: request{method: "GET", path: "/api/sessions/resolve", as: "viewer"}, want: 400},
		{name: "ConsoleMemoTypeUnknown", r: request{method: "GET", path: "/memos?type=poem", as: "cookie"}, want: 400},
		{name: "ConsoleRunStatusUnknown", r: request{method: "GET", path: "/runs?status=sleeping", as: "cookie"}, want: 400},

		// Unknown ids and routes: 404; wrong method 405.
		{name: "UnknownMemo", r: request{method: "GET", path: "/api/memos/mem_missing", as: "viewer"}, want: 404},
		{name: "UnknownQueueItem", r: request{method: "GET", path: "/api/queue/itm_missing", as: "viewer"}, want: 404},
		{name: "UnknownRun", r: request{method: "GET", path: "/api/runs/run_missing", as: "viewer"}, want: 404},
		{name: "UnknownHold", r: request{method: "GET", path: "/api/holds/hld_missing", as: "viewer"}, want: 404},
		{name: "UnknownSession", r: request{method: "GET", path: "/api/sessions/ses_missing", as: "viewer"}, want: 404},
		{name: "UnknownTag", r: request{method: "GET", path: "/api/sessions/resolve?tag=nobody:here", as: "viewer"}, want: 404},
		{name: "UnknownEventsSession", r: request{method: "GET", path: "/api/sessions/ses_missing/events", as: "viewer"}, want: 404},
		{name: "EmptyCommand", r: request{method: "POST", path: "/api/workflows//enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"payload": map[string]any{}})}, want: 404},
		{name: "UnknownCommand", r: request{method: "POST", path: "/api/workflows/no-such/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k"})}, want: 404},
		{name: "UnknownHoldDecision", r: request{method: "POST", path: "/api/holds/hld_missing/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "approve"})}, want: 404},
		{name: "UnknownMemoUpdate", r: request{method: "PUT", path: "/api/memos/mem_missing", as: "steward", contentType: jsonType,
			body: js(map[string]any{"body": "b", "expectedVersion": 1})}, want: 404},
		{name: "UnknownSessionArchive", r: request{method: "POST", path: "/api/sessions/ses_missing/archive", as: "steward"}, want: 404},
		{name: "UnknownSessionMessage", r: request{method: "POST", path: "/api/sessions/ses_missing/messages", as: "steward", contentType: jsonType,
			body: js(map[string]any{"text": "hello"})}, want: 404},
		{name: "UnknownEnqueueSession", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-unknown-session", "sessionId": "ses_missing"})}, want: 404},
		{name: "UnknownRoute", r: request{method: "GET", path: "/api/nothing-here", as: "viewer"}, want: 404},
		{name: "WrongMethod", r: request{method: "DELETE", path: "/api/memos", as: "admin"}, want: 405, allow: "GET, HEAD, POST"},
		{name: "WrongMethodOnItem", r: request{method: "PATCH", path: "/api/memos/{memo}", as: "admin"}, want: 405, allow: "GET, HEAD, PUT"},
		{name: "WrongMethodOnAction", r: request{method: "GET", path: "/api/holds/hld_missing/decision", as: "viewer"}, want: 405, allow: "POST"},
		{name: "ConsoleWrongMethod", r: request{method: "DELETE", path: "/memos", as: "cookie"}, want: 405, allow: "GET, HEAD"},
		{name: "ConsoleWrongMethodOnForm", r: request{method: "PUT", path: "/memos/{memo}/edit", as: "cookie"}, want: 405, allow: "GET, HEAD, POST"},
		{name: "ConsoleUnknownHold", r: request{method: "GET", path: "/holds/hld_missing", as: "cookie"}, want: 404},
		{name: "ConsoleUnknownRun", r: request{method: "GET", path: "/runs/run_missing", as: "cookie"}, want: 404},
		{name: "ConsoleUnknownSession", r: request{method: "GET", path: "/sessions/ses_missing", as: "cookie"}, want: 404},
		{name: "ConsoleUnknownMemo", r: request{method: "GET", path: "/memos/mem_missing", as: "cookie"}, want: 404},
		{name: "ConsoleUnknownWorkflowEnqueue", r: request{method: "POST", path: "/workflows/no-such/enqueue", as: "cookie", contentType: formType,
			body: form("brief", "b")}, want: 404},

		// Bad JSON, wrong content type, missing and unknown fields.
		{name: "MalformedJSON", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: []byte(`{"title":`)}, want: 400},
		{name: "JSONArray", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: []byte(`[]`)}, want: 400},
		{name: "TrailingData", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: []byte(`{"title":"t","body":"b"} {}`)}, want: 400},
		{name: "UnknownField", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "author": "me"})}, want: 400},
		{name: "WrongFieldType", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: []byte(`{"title":7,"body":"b"}`)}, want: 400},
		{name: "TextPlain", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: "text/plain",
			body: js(map[string]any{"title": "t", "body": "b"})}, want: 415},
		{name: "NoContentType", r: request{method: "POST", path: "/api/memos", as: "steward", body: js(map[string]any{"title": "t", "body": "b"})}, want: 415},
		{name: "FormToJSONEndpoint", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: formType, body: form("title", "t")}, want: 415},
		{name: "MissingTitle", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: js(map[string]any{"body": "b"})}, want: 400},
		{name: "MissingBody", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: js(map[string]any{"title": "t"})}, want: 400},
		{name: "MemoTypeUnknownOnCreate", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "memoType": "poem"})}, want: 400},
		{name: "UpdateWithoutVersion", r: request{method: "PUT", path: "/api/memos/{memo}", as: "steward", contentType: jsonType,
			body: js(map[string]any{"body": "b"})}, want: 400},
		{name: "UpdateStaleVersion", r: request{method: "PUT", path: "/api/memos/{memo}", as: "steward", contentType: jsonType,
			body: js(map[string]any{"body": "b", "expectedVersion": 99})}, want: 409},
		{name: "EnqueueWithoutDedupeKey", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"payload": map[string]any{"brief": "b"}})}, want: 400},
		{name: "EnqueuePayloadNotAnObject", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: []byte(`{"dedupeKey":"k","payload":[1,2]}`)}, want: 400},
		{name: "EnqueuePausedWorkflow", r: request{method: "POST", path: "/api/workflows/weekly-digest/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-paused"})}, want: 409},
		{name: "EnqueueUnknownTargetMemo", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-target", "payload": map[string]any{"brief": "b", "targetMemoId": "mem_missing"}})}, want: 400},
		{name: "EnqueueTargetMemoNotAString", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-target2", "payload": map[string]any{"targetMemoId": 12}})}, want: 400},
		{name: "DecisionUnknownValue", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "maybe"})}, want: 400},
		{name: "DecisionEditedReject", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "reject", "output": "edited"})}, want: 400},
		{name: "SessionCommandUnknown", r: request{method: "POST", path: "/api/sessions/{session}/commands", as: "steward", contentType: jsonType,
			body: js(map[string]any{"command": "/reboot"})}, want: 400},
		{name: "SessionMessageEmpty", r: request{method: "POST", path: "/api/sessions/{session}/messages", as: "steward", contentType: jsonType,
			body: js(map[string]any{"text": "  "})}, want: 400},
		{name: "SessionForkBadTime", r: request{method: "POST", path: "/api/sessions/{agent}/fork", as: "steward", contentType: jsonType,
			body: js(map[string]any{"atTs": "yesterday"})}, want: 400},
		{name: "SessionResolveTagInvalidUTF8", r: request{method: "GET", path: "/api/sessions/resolve?tag=%ff", as: "viewer"}, want: 400},
		{name: "SessionResolveTagNUL", r: request{method: "GET", path: "/api/sessions/resolve?tag=a%00", as: "viewer"}, want: 400},
		{name: "SessionForkBeforeFirstEvent", r: request{method: "POST", path: "/api/sessions/{agent}/fork", as: "steward", contentType: jsonType,
			body: js(map[string]any{"atTs": "2001-01-01T00:00:00Z"})}, want: 400},
		{name: "SessionPolicyUnknown", r: request{method: "POST", path: "/api/sessions/{session}/policy", as: "steward", contentType: jsonType,
			body: js(map[string]any{"policy": "reckless"})}, want: 400},
		{name: "SessionReservedTag", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "squat", "tag": "slack:C1:1700000000.000100"})}, want: 400},
		{name: "InternalSessionEmptyPurpose", r: request{method: "POST", path: "/api/internal/sessions", header: internal, contentType: jsonType,
			body: js(map[string]any{"purpose": " "})}, want: 400},
		{name: "InternalSessionMalformedJSON", r: request{method: "POST", path: "/api/internal/sessions", header: internal, contentType: jsonType,
			body: []byte(`{"purpose":`)}, want: 400},

		// Limits: titles, tags, dedupe keys, usernames ≤ 500 characters
		// (≤ 50 tags) → 400; memo bodies past 1 MiB, request bodies and
		// forms past 2 MiB → 413.
		{name: "TitleOneMB", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": long(1_000_000), "body": "b"})}, want: 400},
		{name: "TitleOverLimit", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": over, "body": "b"})}, want: 400},
		{name: "TitleOverLimitInCharacters", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": strings.Repeat("é", store.MaxNameChars+1), "body": "b"})}, want: 400},
		{name: "UpdateTitleOverLimit", r: request{method: "PUT", path: "/api/memos/{memo}", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": over, "body": "b", "expectedVersion": 1})}, want: 400},
		{name: "TagOf900KB", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "tags": []string{long(900_000)}})}, want: 400},
		{name: "FiftyOneTags", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "tags": strings.Split(strings.Repeat("t,", store.MaxTags+1)[:2*(store.MaxTags+1)-1], ",")})}, want: 400},
		{name: "MemoBodyOverOneMiB", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": long(store.MaxMemoBodyBytes + 1)})}, want: 413},
		{name: "MemoNotesOverOneMiB", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "notes": long(store.MaxMemoBodyBytes + 1)})}, want: 413},
		{name: "UpdateBodyOverOneMiB", r: request{method: "PUT", path: "/api/memos/{memo}", as: "steward", contentType: jsonType,
			body: js(map[string]any{"body": long(store.MaxMemoBodyBytes + 1), "expectedVersion": 1})}, want: 413},
		{name: "RequestOverTwoMiB", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": twoMiB})}, want: 413},
		{name: "RequestOverTwoMiBUnauthenticated", r: request{method: "POST", path: "/api/sessions", contentType: jsonType,
			body: js(map[string]any{"title": twoMiB})}, want: 413},
		{name: "DedupeKeyOf900KB", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": long(900_000)})}, want: 400},
		{name: "SessionTitleOverLimit", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": over, "tag": "probe:title"})}, want: 400},
		{name: "SessionTagOverLimit", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "tag": "probe:" + over})}, want: 400},
		{name: "AgentPurposeOverLimit", r: request{method: "POST", path: "/api/internal/sessions", header: internal, contentType: jsonType,
			body: js(map[string]any{"purpose": over})}, want: 400},
		{name: "ConsoleFormOverTwoMiBBeforeCSRF", r: request{method: "POST", path: "/sessions", as: "cookie", noCSRF: true, contentType: formType,
			body: form("title", twoMiB)}, want: 413},
		{name: "ConsoleSignInOverTwoMiB", r: request{method: "POST", path: "/login", contentType: formType, body: form("username", twoMiB)}, want: 413},
		{name: "ConsoleSessionTitleOverLimit", r: request{method: "POST", path: "/sessions", as: "cookie", contentType: formType,
			body: form("title", over)}, want: 303, location: "/sessions"},
		{name: "ConsoleDedupeKeyOverLimit", r: request{method: "POST", path: "/workflows/draft-memo/enqueue", as: "cookie", contentType: formType,
			body: form("brief", "b", "dedupe_key", over)}, want: 400}, // the form again, as sent
		{name: "ConsoleUserBadSlackID", r: request{method: "POST", path: "/users", as: "admin-cookie", contentType: formType,
			body: form("username", "fay", "password", "long enough password", "role", "steward", "slack_user_id", "not a slack id")}, want: 303, location: "/users"},
		{name: "ConsoleUsernameOverLimit", r: request{method: "POST", path: "/users", as: "admin-cookie", contentType: formType,
			body: form("username", over, "password", "long enough password", "role", "viewer")}, want: 303, location: "/users"},

		// Text must be valid UTF-8 without NUL, everywhere.
		{name: "TitleNUL", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: js(map[string]any{"title": "a\x00b", "body": "b"})}, want: 400},
		{name: "BodyNUL", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType, body: js(map[string]any{"title": "t", "body": "b\x00"})}, want: 400},
		{name: "TagNUL", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "tags": []string{"\x00"}})}, want: 400},
		// A blank tag names nothing: refused, not silently dropped.
		{name: "TagBlank", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b", "tags": []string{"otters", "  "}})}, want: 400},
		{name: "TitleInvalidUTF8", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: []byte("{\"title\":\"a\xffb\",\"body\":\"b\"}")}, want: 400},
		{name: "EscapedBackslashIsNotNUL", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: []byte(`{"title":"a\\u0000 is how JSON writes NUL","body":"b"}`)}, want: 201, changes: true},
		{name: "DedupeKeyNUL", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k\x00"})}, want: 400},
		{name: "PayloadNUL", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-nul", "payload": map[string]any{"brief": []any{"deep\x00"}}})}, want: 400},
		// Nested past what the stores' JSON functions read (SQLite stops
		// at 1,000 levels): an item like that would fail every claim.
		{name: "PayloadTooDeep", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			body: []byte(`{"dedupeKey":"k-deep","payload":{"a":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}}`)}, want: 400},
		{name: "SessionContextTooDeep", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: jsonType,
			body: []byte(`{"title":"t","tag":"probe:deep","context":{"a":` + strings.Repeat(`{"b":`, 100) + `1` + strings.Repeat("}", 100) + `}}`)}, want: 400},
		{name: "SessionContextNUL", r: request{method: "POST", path: "/api/sessions", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": "t", "tag": "probe:context", "context": map[string]any{"k\x00": "v"}})}, want: 400},
		{name: "SessionMessageInvalidUTF8", r: request{method: "POST", path: "/api/sessions/{session}/messages", as: "steward", contentType: jsonType,
			body: []byte("{\"text\":\"hi \xc3\"}")}, want: 400},
		{name: "DecisionCommentNUL", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "reject", "comment": "no\x00"})}, want: 400},
		{name: "DecisionCommentOverLimit", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "reject", "comment": strings.Repeat("x", store.MaxCommentChars+1)})}, want: 400},
		{name: "DecisionOutputOver1MiB", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "steward", contentType: jsonType,
			body: js(map[string]any{"decision": "approve", "output": strings.Repeat("x", store.MaxMemoBodyBytes+1)})}, want: 413},
		{name: "ConsoleDecisionReasonOverLimit", r: request{method: "POST", path: "/holds/{hold}/decision", as: "cookie", contentType: formType,
			body: form("decision", "reject", "reason", strings.Repeat("x", store.MaxCommentChars+1))}, want: 303},
		{name: "ConsoleTitleNUL", r: request{method: "POST", path: "/sessions", as: "cookie", contentType: formType, body: form("title", "a\x00b")}, want: 400},
		{name: "ConsoleTitleInvalidUTF8", r: request{method: "POST", path: "/sessions", as: "cookie", contentType: formType, body: []byte("title=a%FFb")}, want: 400},
		{name: "ConsoleDecisionCommentNUL", r: request{method: "POST", path: "/holds/{hold}/decision", as: "cookie", contentType: formType,
			body: form("decision", "reject", "comment", "no\x00")}, want: 400},
		{name: "ConsoleUsernameNUL", r: request{method: "POST", path: "/users", as: "admin-cookie", contentType: formType,
			body: form("username", "ev\x00il", "password", "long enough password", "role", "viewer")}, want: 400},
		{name: "ConsoleMalformedForm", r: request{method: "POST", path: "/sessions", as: "cookie", contentType: formType, body: []byte("title=%zz")}, want: 400},
		{name: "ConsoleDecisionUnknownValue", r: request{method: "POST", path: "/holds/{hold}/decision", as: "cookie", contentType: formType,
			body: form("decision", "maybe")}, want: 303, location: "/holds/{hold}"},

		// Credentials and rights: 401 / 403, and a refused stamp counts nothing.
		{name: "NoCredentials", r: request{method: "GET", path: "/api/memos"}, want: 401},
		{name: "UnknownKey", r: request{method: "GET", path: "/api/memos", header: map[string]string{"Authorization": "Bearer hf_nope"}}, want: 401},
		{name: "NotBearer", r: request{method: "GET", path: "/api/memos", header: map[string]string{"Authorization": "Basic eDp5"}}, want: 401},
		{name: "ViewerMayNotCreateMemos", r: request{method: "POST", path: "/api/memos", as: "viewer", contentType: jsonType,
			body: js(map[string]any{"title": "t", "body": "b"})}, want: 403},
		{name: "ViewerMayNotEnqueue", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "viewer", contentType: jsonType,
			body: js(map[string]any{"dedupeKey": "k-viewer"})}, want: 403},
		{name: "ViewerDecisionIsRefusedAndAudited", r: request{method: "POST", path: "/api/holds/{hold}/decision", as: "viewer", contentType: jsonType,
			body: js(map[string]any{"decision": "approve"})}, want: 403, changes: true},
		{name: "CookieWriteWithoutCSRF", r: request{method: "POST", path: "/api/sessions", as: "cookie", noCSRF: true, contentType: jsonType,
			body: js(map[string]any{"title": "t", "tag": "probe:csrf"})}, want: 403},
		{name: "ConsoleFormWithoutCSRF", r: request{method: "POST", path: "/sessions", as: "cookie", noCSRF: true, contentType: formType,
			body: form("title", "t")}, want: 403},
		{name: "ConsoleStewardMayNotAddUsers", r: request{method: "POST", path: "/users", as: "cookie", contentType: formType,
			body: form("username", "mallory", "password", "long enough password", "role", "admin")}, want: 403},
		{name: "InternalWithoutKey", r: request{method: "POST", path: "/api/internal/sessions", contentType: jsonType, body: js(map[string]any{"purpose": "p"})}, want: 401},
		{name: "InternalWrongKey", r: request{method: "GET", path: "/api/internal/cron/run-workflows", header: map[string]string{"x-internal-key": "wrong"}}, want: 401},
		{name: "InternalWithUnknownAPIKey", r: request{method: "POST", path: "/api/internal/sessions", contentType: jsonType, body: js(map[string]any{"purpose": "p"}),
			header: map[string]string{"x-internal-key": internalKey, "Authorization": "Bearer hf_nope"}}, want: 401},
		{name: "MetricsWithoutKey", r: request{method: "GET", path: "/metrics"}, want: 401},
		{name: "TrackingUnknownSession", r: request{method: "GET", path: "/api/workflows", as: "steward",
			header: map[string]string{api.SessionHeader: "ses_missing"}}, want: 404},
		{name: "TrackingSomeoneElsesSession", r: request{method: "GET", path: "/api/workflows", as: "steward2",
			header: map[string]string{api.SessionHeader: "{agent}"}}, want: 403},
		{name: "EnqueueIntoSomeoneElsesSession", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward2", contentType: jsonType,
			header: map[string]string{api.SessionHeader: "{agent}"}, body: js(map[string]any{"dedupeKey": "k-other"})}, want: 403},

		// Slack HTTP endpoints, signed as Slack signs.
		{name: "SlackUnsigned", r: request{method: "POST", path: "/slack/events", contentType: jsonType, body: slackEvent}, want: 401},
		{name: "SlackBadSignature", r: request{method: "POST", path: "/slack/events", contentType: jsonType, body: slackEvent,
			header: map[string]string{"X-Slack-Request-Timestamp": strconv.FormatInt(time.Now().Unix(), 10), "X-Slack-Signature": "v0=" + strings.Repeat("0", 64)}}, want: 401},
		{name: "SlackStaleTimestamp", r: request{method: "POST", path: "/slack/events", contentType: jsonType, body: slackEvent,
			header: map[string]string{"X-Slack-Request-Timestamp": strconv.FormatInt(staleTS, 10), "X-Slack-Signature": slackSign(staleTS, slackEvent)}}, want: 401},
		{name: "SlackSignatureOfAnotherBody", r: request{method: "POST", path: "/slack/events", contentType: jsonType, body: slackEvent,
			header: map[string]string{"X-Slack-Request-Timestamp": strconv.FormatInt(time.Now().Unix(), 10), "X-Slack-Signature": slackSign(time.Now().Unix(), []byte("{}"))}}, want: 401},
		{name: "SlackOverOneMiB", r: request{method: "POST", path: "/slack/events", as: "slack", contentType: jsonType,
			body: js(map[string]any{"type": "event_callback", "event_id": "EvBig", "pad": long(1 << 20)})}, want: 413},
		{name: "SlackMalformedJSON", r: request{method: "POST", path: "/slack/events", as: "slack", contentType: jsonType, body: []byte(`{"type":`)}, want: 400},
		{name: "SlackInteractionWithoutPayload", r: request{method: "POST", path: "/slack/interactions", as: "slack", contentType: formType,
			body: form("nothing", "here")}, want: 400},
		{name: "SlackInteractionMalformedPayload", r: request{method: "POST", path: "/slack/interactions", as: "slack", contentType: formType,
			body: form("payload", `{"type":`)}, want: 400},
		{name: "SlackWrongMethod", r: request{method: "GET", path: "/slack/events"}, want: 405, allow: "POST"},
		{name: "SlackUnknownRoute", r: request{method: "POST", path: "/slack/nothing", as: "slack", contentType: jsonType, body: []byte(`{}`)}, want: 404},

		// Sign-in: next is followed only when it is a local path.
		{name: "SignInNextTabTrick", r: request{method: "GET", path: "/login?next=/%09/evil.example/x", as: "cookie"}, want: 303, location: "/"},
		{name: "SignInNextBackslash", r: request{method: "GET", path: "/login?next=/%5Cevil.example", as: "cookie"}, want: 303, location: "/"},
		{name: "SignInNextLocal", r: request{method: "GET", path: "/login?next=/memos", as: "cookie"}, want: 303, location: "/memos"},

		// Controls: accepted requests do change state, so the fingerprint
		// would see a refused one that did.
		{name: "ControlTitleAtTheLimit", r: request{method: "POST", path: "/api/memos", as: "steward", contentType: jsonType,
			body: js(map[string]any{"title": long(store.MaxNameChars), "body": "b", "tags": make([]string, 0)})}, want: 201, changes: true},
		{name: "ControlEnqueueJoinsTrackedSession", r: request{method: "POST", path: "/api/workflows/draft-memo/enqueue", as: "steward", contentType: jsonType,
			header: map[string]string{api.SessionHeader: "{agent}"}, body: js(map[string]any{"dedupeKey": "k-join"})}, want: 201, changes: true},
		{name: "ControlSignedSlackEvent", r: request{method: "POST", path: "/slack/events", as: "slack", contentType: jsonType, body: slackEvent}, want: 200, changes: true},
	}
	require.GreaterOrEqual(t, len(cases), 60)

	var probes []string
	for _, tc := range cases {
		var body struct{ Tag string }
		if json.Unmarshal(tc.r.body, &body) == nil && strings.HasPrefix(body.Tag, "probe:") {
			probes = append(probes, body.Tag)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.path = f.expand(r.path)
			r.body = []byte(f.expand(string(r.body)))
			h := map[string]string{}
			for k, v := range r.header {
				h[k] = f.expand(v)
			}
			r.header = h
			b := steward
			if r.as == "admin-cookie" {
				r.as, b = "cookie", admin
			}
			before := s.fingerprint(t, f, probes)
			res := s.do(t, b, r)
			after := s.fingerprint(t, f, probes)

			require.Less(t, res.status, 500, "no bad input is a server error: %s", truncate(res.body))
			require.Equal(t, tc.want, res.status, "%s %s → %s", r.method, r.path, truncate(res.body))
			if tc.location != "" {
				// A refusal redirects to its form's page (post/redirect/get),
				// which may carry what was typed in its query.
				loc, _, _ := strings.Cut(res.header.Get("Location"), "?")
				loc, _, _ = strings.Cut(loc, "#")
				require.Equal(t, f.expand(tc.location), loc)
			}
			if tc.allow != "" {
				require.Equal(t, tc.allow, res.header.Get("Allow"), "a 405 says which methods the path answers")
			}
			if strings.HasPrefix(r.path, "/api/") && res.status >= 400 {
				var e api.ErrorBody
				require.NoError(t, json.Unmarshal(res.body, &e), "API errors are JSON: %s", truncate(res.body))
				require.NotEmpty(t, e.Error.Code)
				require.NotEmpty(t, e.Error.Message)
			}
			if tc.changes {
				require.NotEqual(t, before, after, "the control changes state, so the fingerprint sees changes")
			} else {
				require.Equal(t, before, after, "a refused request changes nothing")
			}
		})
	}
}

// manyTagFilters is n distinct tag: filters.
func manyTagFilters(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "tag:t%d ", i)
	}
	return b.String()
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
