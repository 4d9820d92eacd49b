package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/storetest"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

type apiBundle struct {
	srv     *httptest.Server
	db      store.Store
	svc     *sessions.Service
	steward string // API key
	viewer  string
	keyID   string // the steward key's id
}

func setupAPI(t *testing.T, internalKey string) *apiBundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := sessions.New(db, sessions.Config{DefaultPolicy: store.PolicyAuto, Models: model.NewRegistry("template", model.Config{}), DefaultModel: "template"}, nil, log)
	b := &apiBundle{db: db, svc: svc}
	for _, role := range []string{store.RoleSteward, store.RoleViewer} {
		key, hash := auth.NewAPIKey()
		k, err := db.APIKeyCreate(ctx, &store.APIKey{Name: role, Role: role, KeyHash: hash})
		require.NoError(t, err)
		if role == store.RoleSteward {
			b.steward, b.keyID = key, k.ID
		} else {
			b.viewer = key
		}
	}
	a := api.New(api.Deps{Store: db, Library: library.New(db, log), Log: log, Sessions: svc, InternalKey: internalKey})
	b.srv = httptest.NewServer(server.Handler(server.Deps{Store: db, API: a, InternalKey: internalKey}))
	t.Cleanup(func() {
		b.srv.Close()
		svc.Close()
	})
	return b
}

type call struct {
	method, path string
	body         any
	key          string
	header       map[string]string
}

func (b *apiBundle) do(t *testing.T, c call) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if c.body != nil {
		raw, ok := c.body.(string)
		if !ok {
			bs, err := json.Marshal(c.body)
			require.NoError(t, err)
			raw = string(bs)
		}
		rd = bytes.NewBufferString(raw)
	}
	req, err := http.NewRequest(c.method, b.srv.URL+c.path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "-" {
		key := c.key
		if key == "" {
			key = b.steward
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func (b *apiBundle) mustDo(t *testing.T, c call, want int) map[string]any {
	t.Helper()
	status, out := b.do(t, c)
	require.Equal(t, want, status, "%s %s → %v", c.method, c.path, out)
	return out
}

func listIDs(t *testing.T, out map[string]any) []string {
	t.Helper()
	ids := []string{}
	for _, s := range out["sessions"].([]any) {
		ids = append(ids, s.(map[string]any)["id"].(string))
	}
	return ids
}

func TestSessionRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAPI(t, "")

	created := b.mustDo(t, call{method: "POST", path: "/api/sessions", body: map[string]any{"title": "Otters", "tag": "project:otters", "context": map[string]any{"team": "wild"}}}, 201)
	id := created["id"].(string)
	for _, field := range []string{"id", "title", "status", "doneReason", "origin", "platform", "tags", "context", "capabilities", "archived",
		"forkedFrom", "policy", "requestCount", "lastActiveAt", "createdAt", "openHolds", "activeRunId"} {
		require.Contains(t, created, field, "SPEC §7 session shape")
	}
	require.Equal(t, store.OriginAPI, created["origin"], "an API-key caller's session")
	require.Equal(t, "auto", created["policy"])

	// Bad input: nothing changes.
	b.mustDo(t, call{method: "POST", path: "/api/sessions", body: map[string]any{"tag": "project:otters"}}, 409)
	b.mustDo(t, call{method: "POST", path: "/api/sessions", body: map[string]any{"tag": "slack:C1:1.1"}}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions", body: `{"title": 3}`}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions", body: map[string]any{"origin": "channel"}}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions", body: map[string]any{}, key: b.viewer}, 403)
	req, err := http.NewRequest("POST", b.srv.URL+"/api/sessions", bytes.NewBufferString(`{"title":"x"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.steward)
	req.Header.Set("Content-Type", "text/plain")
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)

	got := b.mustDo(t, call{method: "GET", path: "/api/sessions/resolve?tag=project:otters", key: b.viewer}, 200)
	require.Equal(t, id, got["id"])
	b.mustDo(t, call{method: "GET", path: "/api/sessions/resolve?tag=nope"}, 404)
	b.mustDo(t, call{method: "GET", path: "/api/sessions/resolve"}, 400)
	b.mustDo(t, call{method: "GET", path: "/api/sessions/ses_missing"}, 404)

	// Empty sessions are left out; API sessions only show when toggled on.
	require.Empty(t, listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=api"}, 200)))

	// A message is accepted at once and answered in the background.
	msg := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/messages", body: map[string]any{"text": "hello"}}, 202)
	require.NotEmpty(t, msg["turnId"])
	first := msg["event"].(map[string]any)
	require.Equal(t, "user_message", first["type"])
	require.Equal(t, "key:"+b.keyID, first["actor"])
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, first["ts"], "RFC 3339, UTC, µs")
	var reply map[string]any
	storetest.Until(t, b.db, func() bool { // the reply's commit wakes the check
		_, out := b.do(t, call{method: "GET", path: "/api/sessions/" + id + "/events?after=" + url.QueryEscape(first["ts"].(string))})
		evs, _ := out["events"].([]any)
		if len(evs) == 0 {
			return false
		}
		reply = evs[0].(map[string]any)
		return true
	}, 10*time.Second, "polling after the user message yields the reply")
	require.Equal(t, "assistant_message", reply["type"])
	require.Contains(t, reply["payload"].(map[string]any)["text"], "No workflows are live")
	after := b.mustDo(t, call{method: "GET", path: "/api/sessions/" + id + "/events?after=" + url.QueryEscape(reply["ts"].(string))}, 200)
	require.Empty(t, after["events"], "after is exclusive")
	all := b.mustDo(t, call{method: "GET", path: "/api/sessions/" + id + "/events", key: b.viewer}, 200)
	require.Len(t, all["events"], 2)
	b.mustDo(t, call{method: "GET", path: "/api/sessions/" + id + "/events?after=yesterday"}, 400)
	b.mustDo(t, call{method: "GET", path: "/api/sessions/ses_missing/events"}, 404)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/messages", body: map[string]any{"text": ""}}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/ses_missing/messages", body: map[string]any{"text": "hi"}}, 404)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/messages", body: "text=hi"}, 400)

	page := b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=api,agent"}, 200)
	require.Equal(t, []string{id}, listIDs(t, page))
	require.Equal(t, "", page["next"])
	require.Empty(t, listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions"}, 200)), "default filter hides api sessions")
	b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=wiki"}, 400)
	b.mustDo(t, call{method: "GET", path: "/api/sessions?cursor=zzz"}, 400)
	b.mustDo(t, call{method: "GET", path: "/api/sessions?includeArchived=maybe"}, 400)

	// Commands.
	st := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/commands", body: map[string]any{"command": "/status"}}, 200)
	require.Equal(t, "done", st["session"].(map[string]any)["status"])
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/commands", body: map[string]any{"command": "/reboot"}}, 400)
	term := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/commands", body: map[string]any{"command": "/terminate"}}, 200)
	require.Equal(t, false, term["cancelledTurn"])
	comp := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/commands", body: map[string]any{"command": "/compact"}}, 200)
	require.Equal(t, "compact_summary", comp["summary"].(map[string]any)["type"])

	// Policy.
	pol := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/policy", body: map[string]any{"policy": "manual"}}, 200)
	require.Equal(t, "manual", pol["policy"])
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/policy", body: map[string]any{"policy": "sometimes"}}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/ses_missing/policy", body: map[string]any{"policy": "auto"}}, 404)

	// Fork at the first message: exactly that event, and the posture of that moment.
	fork := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/fork", body: map[string]any{"atTs": first["ts"]}}, 201)
	require.Equal(t, id, fork["forkedFrom"])
	require.Equal(t, "auto", fork["policy"])
	fevs := b.mustDo(t, call{method: "GET", path: "/api/sessions/" + fork["id"].(string) + "/events"}, 200)["events"].([]any)
	require.Len(t, fevs, 1)
	require.Equal(t, first["ts"], fevs[0].(map[string]any)["ts"])
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/fork", body: map[string]any{"atTs": "noon"}}, 400)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/ses_missing/fork", body: map[string]any{"atTs": first["ts"]}}, 404)

	// Archive hides; includeArchived shows.
	arch := b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/archive"}, 200)
	require.Equal(t, true, arch["archived"])
	require.Equal(t, []string{fork["id"].(string)}, listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=api"}, 200)))
	require.ElementsMatch(t, []string{fork["id"].(string), id},
		listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=api&includeArchived=true"}, 200)))
	b.mustDo(t, call{method: "POST", path: "/api/sessions/" + id + "/unarchive"}, 200)
	b.mustDo(t, call{method: "POST", path: "/api/sessions/ses_missing/archive"}, 404)

	_, err = b.svc.GetByID(ctx, id)
	require.NoError(t, err)
}

func TestSessionPaginationOverAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAPI(t, "")
	var want []string
	for range 5 {
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		_, err = b.svc.AppendEvent(ctx, ses.ID, store.EventUserMessage, "user:u", nil)
		require.NoError(t, err)
		want = append([]string{ses.ID}, want...)
	}
	var got []string
	path := "/api/sessions?limit=2"
	for {
		out := b.mustDo(t, call{method: "GET", path: path}, 200)
		got = append(got, listIDs(t, out)...)
		if out["next"] == "" {
			break
		}
		path = "/api/sessions?limit=2&cursor=" + url.QueryEscape(out["next"].(string))
	}
	require.Equal(t, want, got, "keyset pages, newest activity first")
}

func TestInternalSessionsAndTrackingHeader(t *testing.T) {
	t.Parallel()

	t.Run("NoKeyConfiguredIs404", func(t *testing.T) {
		t.Parallel()
		b := setupAPI(t, "")
		b.mustDo(t, call{method: "POST", path: "/api/internal/sessions", body: map[string]any{"purpose": "x"}, key: "-",
			header: map[string]string{"x-internal-key": "anything"}}, 404)
	})

	t.Run("AgentSessionTracked", func(t *testing.T) {
		t.Parallel()
		b := setupAPI(t, "s3cret")
		missing := b.mustDo(t, call{method: "POST", path: "/api/internal/sessions", body: map[string]any{"purpose": "x"}, key: "-"}, 401)
		require.Contains(t, fmt.Sprint(missing), "need the x-internal-key header")
		wrong := b.mustDo(t, call{method: "POST", path: "/api/internal/sessions", body: map[string]any{"purpose": "x"}, key: "-",
			header: map[string]string{"x-internal-key": "wrong"}}, 401)
		require.Contains(t, fmt.Sprint(wrong), "is not this server's internal key", "a wrong key is told apart from a missing one")
		b.mustDo(t, call{method: "POST", path: "/api/internal/sessions", body: map[string]any{"purpose": " "}, key: "-",
			header: map[string]string{"x-internal-key": "s3cret"}}, 400)
		// The agent sends its API key beside the internal key: the session
		// is that key's, which may then stamp it.
		ag := b.mustDo(t, call{method: "POST", path: "/api/internal/sessions", body: map[string]any{"purpose": "weekly digest loop"},
			header: map[string]string{"x-internal-key": "s3cret"}}, 201)
		require.Equal(t, "agent", ag["origin"])
		require.Equal(t, "weekly digest loop", ag["title"])
		id := ag["id"].(string)

		// Any API request under the header counts, whatever route it hits.
		hdr := map[string]string{api.SessionHeader: id}
		b.mustDo(t, call{method: "GET", path: "/api/workflows", header: hdr}, 200)
		b.mustDo(t, call{method: "GET", path: "/api/memos", header: hdr}, 200)
		got := b.mustDo(t, call{method: "GET", path: "/api/sessions/" + id, header: hdr}, 200)
		require.EqualValues(t, 3, got["requestCount"])
		require.Equal(t, b.keyID, got["callerKeyId"])
		require.Equal(t, []string{id}, listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions?origin=agent"}, 200)),
			"agent sessions are listed when toggled on")
		require.Empty(t, listIDs(t, b.mustDo(t, call{method: "GET", path: "/api/sessions"}, 200)), "and hidden by default")

		// Another identity may not stamp it.
		b.mustDo(t, call{method: "GET", path: "/api/workflows", key: b.viewer, header: hdr}, 403)
		// An unknown id is refused, loudly.
		b.mustDo(t, call{method: "GET", path: "/api/workflows", header: map[string]string{api.SessionHeader: "ses_missing"}}, 404)
		// Unauthenticated requests are refused before the header is read.
		b.mustDo(t, call{method: "GET", path: "/api/workflows", key: "-", header: hdr}, 401)
		got = b.mustDo(t, call{method: "GET", path: "/api/sessions/" + id}, 200)
		require.EqualValues(t, 3, got["requestCount"])
	})
}
