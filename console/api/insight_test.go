package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
	"github.com/holdfast-bot/holdfast/store/sqlite/sqlitetest"
)

type usageAnswer struct {
	GroupBy string
	Since   time.Time
	Usage   []store.Usage
}

type edgesAnswer struct {
	Since time.Time
	Edges []struct {
		Kind, Source, Label string
		Count               int64
		Latest              []struct {
			RunID, HoldID, WorkflowMemoID, By, Message, Link string
		}
	}
}

func TestUsageAndEdgesRoutes(t *testing.T) {
	t.Parallel()
	b := engineSetup(t, internalKey)
	ctx := context.Background()

	var enq enqueueAnswer
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/weekly-digest/enqueue",
		map[string]any{"dedupeKey": "d1"}, &enq))
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/workflows/draft-memo/enqueue",
		map[string]any{"dedupeKey": "m1", "payload": map[string]any{"title": "T", "brief": "a b c"}}, &enqueueAnswer{}))
	require.Equal(t, http.StatusOK, b.cron(t, internalKey, nil))
	run, err := b.db.RunGetByID(ctx, store.RunIDForItem(enq.Item.ID))
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, run.Status, run.Error)

	var byWorkflow usageAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/usage", nil, &byWorkflow))
	require.Equal(t, "workflow", byWorkflow.GroupBy)
	require.WithinDuration(t, time.Now().Add(-7*24*time.Hour), byWorkflow.Since, time.Minute, "the window defaults to a week")
	require.Len(t, byWorkflow.Usage, 2)
	got := map[string]store.Usage{}
	for _, u := range byWorkflow.Usage {
		got[u.Key] = u
	}
	require.Equal(t, store.Usage{Key: "/weekly-digest", Runs: 1, TokensIn: run.TokensIn, TokensOut: run.TokensOut}, got["/weekly-digest"])
	require.Positive(t, got["/draft-memo"].TokensIn, "a held run's tokens count too")

	var byModel, bySession usageAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/usage?groupBy=model&since=1h", nil, &byModel))
	require.Len(t, byModel.Usage, 1)
	require.Equal(t, "template", byModel.Usage[0].Key)
	require.Equal(t, int64(2), byModel.Usage[0].Runs)
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet,
		"/api/usage?groupBy=session&limit=1&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), nil, &bySession))
	require.Len(t, bySession.Usage, 1)

	// A refused decision and a broken workflow are edges.
	holds, err := b.db.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: 5})
	require.NoError(t, err)
	require.Len(t, holds, 1)
	require.Equal(t, http.StatusForbidden, b.json(t, store.RoleViewer, http.MethodPost, "/api/holds/"+holds[0].ID+"/decision",
		map[string]any{"decision": "approve"}, nil))
	// So is an approval whose edited output fails a Guard check (SPEC
	// §4.3 "records the attempt", §10 "refused decision attempts").
	require.Equal(t, http.StatusConflict, b.json(t, store.RoleAdmin, http.MethodPost, "/api/holds/"+holds[0].ID+"/decision",
		map[string]any{"decision": "approve", "output": strings.Repeat("x", 20_001)}, nil))
	require.Equal(t, http.StatusCreated, b.json(t, store.RoleAdmin, http.MethodPost, "/api/memos",
		map[string]any{"title": "Broken", "body": "# Broken\n\n## Trigger\n- **Command** `/broken`\n", "memoType": "workflow"}, nil))
	var edges edgesAnswer
	require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/edges?since=7d", nil, &edges))
	kinds := map[string]int{}
	for i, e := range edges.Edges {
		kinds[e.Kind] = i
	}
	require.Len(t, edges.Edges, 2, "%+v", edges)
	refused := edges.Edges[kinds[store.EdgeDecisionRefused]]
	require.Equal(t, int64(2), refused.Count)
	require.Equal(t, "Decision attempts refused", refused.Label)
	require.Equal(t, "/holds/"+holds[0].ID, refused.Latest[0].Link)
	broken := edges.Edges[kinds[store.EdgeWorkflowBroken]]
	require.Equal(t, "/workflows/broken", broken.Latest[0].Link)
	require.Contains(t, broken.Latest[0].Message, "Broken does not compile")

	for _, tc := range []struct {
		name, path string
		role       string
		status     int
	}{
		{"UsageNoKey", "/api/usage", "", http.StatusUnauthorized},
		{"EdgesNoKey", "/api/edges", "", http.StatusUnauthorized},
		{"SinceWord", "/api/edges?since=yesterday", store.RoleViewer, http.StatusBadRequest},
		{"SinceNegative", "/api/edges?since=-1h", store.RoleViewer, http.StatusBadRequest},
		{"SinceZero", "/api/usage?since=0", store.RoleViewer, http.StatusBadRequest},
		{"SinceFuture", "/api/edges?since=2999-01-01T00:00:00Z", store.RoleViewer, http.StatusOK},
		{"SinceWeeks", "/api/usage?since=2w", store.RoleViewer, http.StatusOK}, // as memo search's since:2w
		{"GroupByUnknown", "/api/usage?groupBy=colour", store.RoleViewer, http.StatusBadRequest},
		{"LimitZero", "/api/usage?limit=0", store.RoleViewer, http.StatusBadRequest},
		{"LimitHuge", "/api/usage?limit=1001", store.RoleViewer, http.StatusBadRequest},
		{"LatestTooMany", "/api/edges?latest=51", store.RoleViewer, http.StatusBadRequest},
		{"LatestOne", "/api/edges?latest=1", store.RoleViewer, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e errAnswer
			require.Equal(t, tc.status, b.json(t, tc.role, http.MethodGet, tc.path, nil, &e))
			if tc.status == http.StatusBadRequest {
				require.Equal(t, "bad_request", e.Error.Code)
				require.NotEmpty(t, e.Error.Message)
			}
		})
	}
}

// BenchmarkInsightRoutes serves GET /api/edges?since=7d and GET /api/usage
// through the real router over a store holding 100,000 runs over 30 days.
func BenchmarkInsightRoutes(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "insight.db")
	db, err := sqlite.Open(ctx, sqlite.Config{Path: path, Sync: "normal"})
	require.NoError(b, err)
	b.Cleanup(func() { _ = db.Close() })
	sqlitetest.Seed(b, path, sqlitetest.History{Runs: 100_000})
	key, hash := auth.NewAPIKey()
	_, err = db.APIKeyCreate(ctx, &store.APIKey{Name: "bench", Role: store.RoleViewer, KeyHash: hash})
	require.NoError(b, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.Handler(server.Deps{Store: db, API: api.New(api.Deps{Store: db, Log: log})}))
	b.Cleanup(srv.Close)
	for _, path := range []string{"/api/edges?since=7d", "/api/usage", "/api/usage?groupBy=session", "/api/usage?groupBy=model"} {
		b.Run(path, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d", path, resp.StatusCode)
				}
				worst = max(worst, time.Since(t0))
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
		})
	}
}
