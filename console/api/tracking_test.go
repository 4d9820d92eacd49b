package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/store"
)

// send is one API request with extra headers; key names a key of the
// bundle ("" sends none).
func (b *testBundle) send(t *testing.T, key, method, path string, header map[string]string, in any, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(t, err)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+b.keys[key])
	}
	for k, v := range header {
		req.Header.Set(k, v)
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

// TestTrackingHeader covers SPEC §3 agent tracking: an enqueue carrying
// X-Holdfast-Session joins that session, and only the identity that created
// a session (or an admin) may stamp it.
func TestTrackingHeader(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	ctx := context.Background()
	in := map[string]string{"x-internal-key": internalKey}

	// An agent names its API key when it creates its session, so the
	// session is that key's.
	var agent store.Session
	require.Equal(t, http.StatusCreated, b.send(t, store.RoleSteward, http.MethodPost, "/api/internal/sessions", in,
		map[string]any{"purpose": "nightly digest loop"}, &agent))
	require.Equal(t, store.OriginAgent, agent.Origin)
	require.NotEmpty(t, agent.CreatedBy)
	hdr := map[string]string{api.SessionHeader: agent.ID}
	requests := func() int64 {
		s, err := b.db.SessionGetByID(ctx, agent.ID)
		require.NoError(t, err)
		return s.RequestCount
	}

	t.Run("EnqueueJoinsTheHeaderSession", func(t *testing.T) {
		var got enqueueAnswer
		require.Equal(t, http.StatusCreated, b.send(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue", hdr,
			map[string]any{"dedupeKey": "join-1", "payload": map[string]any{"title": "T", "brief": "b"}}, &got))
		require.Equal(t, agent.ID, got.Item.SessionID, "the item joins the session named by the header")
		it, err := b.db.QueueItemGetByID(ctx, got.Item.ID)
		require.NoError(t, err)
		require.Equal(t, agent.ID, it.SessionID)
	})

	t.Run("BodySessionIDWins", func(t *testing.T) {
		var other store.Session
		require.Equal(t, http.StatusCreated, b.send(t, store.RoleSteward, http.MethodPost, "/api/sessions", nil,
			map[string]any{"title": "other"}, &other))
		var got enqueueAnswer
		require.Equal(t, http.StatusCreated, b.send(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue", hdr,
			map[string]any{"dedupeKey": "join-2", "sessionId": other.ID, "payload": map[string]any{"brief": "b"}}, &got))
		require.Equal(t, other.ID, got.Item.SessionID)
	})

	t.Run("OnlyTheCreatorOrAnAdminStamps", func(t *testing.T) {
		for _, tc := range []struct {
			name, key string
			internal  bool
			want      int
		}{
			{"Creator", store.RoleSteward, false, http.StatusOK},
			{"Admin", store.RoleAdmin, false, http.StatusOK},
			{"InternalKey", "", true, http.StatusOK},
			{"OtherSteward", "steward2", false, http.StatusForbidden},
			{"Viewer", store.RoleViewer, false, http.StatusForbidden},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := map[string]string{api.SessionHeader: agent.ID}
				path := "/api/workflows"
				if tc.internal {
					h["x-internal-key"] = internalKey
					path = "/api/internal/cron/run-workflows"
				}
				before := requests()
				var e errAnswer
				status := b.send(t, tc.key, http.MethodGet, path, h, nil, &e)
				require.Equal(t, tc.want, status, e.Error.Message)
				if tc.want == http.StatusForbidden {
					require.Equal(t, "forbidden", e.Error.Code)
					require.Equal(t, before, requests(), "a refused stamp counts nothing")
				} else {
					require.Equal(t, before+1, requests())
				}
			})
		}
	})

	t.Run("AForkIsItsForkersToStamp", func(t *testing.T) {
		evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: agent.ID, Limit: 1})
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		var fork store.Session
		require.Equal(t, http.StatusCreated, b.send(t, "steward2", http.MethodPost, "/api/sessions/"+agent.ID+"/fork", nil,
			map[string]any{"atTs": evs[0].TS}, &fork))
		require.NotEmpty(t, fork.CreatedBy, "the fork records who forked it")
		require.NotEqual(t, agent.CreatedBy, fork.CreatedBy)
		h := map[string]string{api.SessionHeader: fork.ID}
		var e errAnswer
		require.Equal(t, http.StatusOK, b.send(t, "steward2", http.MethodGet, "/api/workflows", h, nil, &e), e.Error.Message)
		require.Equal(t, http.StatusForbidden, b.send(t, store.RoleSteward, http.MethodGet, "/api/workflows", h, nil, &e),
			"the source's creator did not make the fork")
	})

	t.Run("OtherIdentityCannotEnqueueIntoIt", func(t *testing.T) {
		pending, err := b.db.QueueItemCountPending(ctx)
		require.NoError(t, err)
		var e errAnswer
		require.Equal(t, http.StatusForbidden, b.send(t, "steward2", http.MethodPost, "/api/workflows/draft-memo/enqueue", hdr,
			map[string]any{"dedupeKey": "join-3", "payload": map[string]any{"brief": "b"}}, &e))
		after, err := b.db.QueueItemCountPending(ctx)
		require.NoError(t, err)
		require.Equal(t, pending, after, "nothing is queued")
	})

	t.Run("SessionsWithoutACreatorAreAdminOnly", func(t *testing.T) {
		var anon store.Session
		require.Equal(t, http.StatusCreated, b.send(t, "", http.MethodPost, "/api/internal/sessions", in,
			map[string]any{"purpose": "keyless"}, &anon))
		require.Empty(t, anon.CreatedBy)
		h := map[string]string{api.SessionHeader: anon.ID}
		require.Equal(t, http.StatusForbidden, b.send(t, store.RoleSteward, http.MethodGet, "/api/workflows", h, nil, nil))
		require.Equal(t, http.StatusOK, b.send(t, store.RoleAdmin, http.MethodGet, "/api/workflows", h, nil, nil))
	})

	t.Run("InternalRouteRefusesAnUnknownKey", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/api/internal/sessions", bytes.NewReader([]byte(`{"purpose":"p"}`)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-internal-key", internalKey)
		req.Header.Set("Authorization", "Bearer hf_not_a_key")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}
