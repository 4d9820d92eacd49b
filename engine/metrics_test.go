package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
)

// scrape reads e's /metrics as a Prometheus server would and returns each
// sample's value by its text series name (`name{label="v"}`).
func scrape(t *testing.T, e *Engine) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(e.Registry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "sample line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// TestRunsFinishedCountsEverySettledStatus scrapes
// holdfast_runs_finished_total after a run settles by each path there is:
// every settled status is counted, once, wherever the settle happened (the
// runner, a decision, a terminate, a hold timeout, recovery).
func TestRunsFinishedCountsEverySettledStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held := []string{"**Approval** `hold`", "**Hold timeout** `1h`"}
	for _, tc := range []struct {
		name   string
		opts   setupOpts
		policy []string
		brief  string
		// settle drives the item's run to its end.
		settle func(t *testing.T, b *testBundle, it *store.QueueItem)
		want   string
	}{
		{name: "Succeeded", want: store.RunSucceeded},
		{name: "FailedGuard", brief: "FORBIDDEN", want: store.RunFailed},
		{name: "CancelledByRejection", policy: held, want: store.RunCancelled,
			settle: func(t *testing.T, b *testBundle, it *store.QueueItem) {
				h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
				_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "reject",
					Decider: via(steward(b.user(t, "ada", store.RoleSteward, "")), "console")})
				require.NoError(t, err)
			}},
		{name: "CancelledByTerminateWhileHeld", policy: held, want: store.RunCancelled,
			settle: func(t *testing.T, b *testBundle, it *store.QueueItem) {
				b.waitRun(t, it.ID, EventHoldOpened)
				c, err := b.eng.CancelSessionRuns(ctx, it.SessionID, via(steward(b.user(t, "ada", store.RoleSteward, "")), "api"))
				require.NoError(t, err)
				require.Equal(t, 1, c.Runs)
			}},
		{name: "CancelledByHoldTimeout", policy: held, want: store.RunCancelled,
			settle: func(t *testing.T, b *testBundle, it *store.QueueItem) {
				b.waitRun(t, it.ID, EventHoldOpened)
				b.clock.Advance(2 * time.Hour)
				n, err := b.eng.expireHolds(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n)
			}},
		{name: "CancelledInFlight", opts: setupOpts{blockLLM: true}, policy: []string{"**Model** `openai:slow`"}, want: store.RunCancelled,
			settle: func(t *testing.T, b *testBundle, it *store.QueueItem) {
				select {
				case <-b.llm.Arrived():
				case <-time.After(10 * time.Second):
					t.Fatal("model was never called")
				}
				c, err := b.eng.CancelSessionRuns(ctx, it.SessionID, via(steward(b.user(t, "ada", store.RoleSteward, "")), "api"))
				require.NoError(t, err)
				require.Equal(t, 1, c.Runs)
			}},
		{name: "RecoveryExhausted", opts: setupOpts{noStart: true, cfg: Config{StuckRun: time.Minute, MaxRecovery: -1}},
			want: store.RunRecoveryExhausted,
			settle: func(t *testing.T, b *testBundle, it *store.QueueItem) {
				dead := New(Config{RunnerID: "dead", DisableScheduler: true}, b.db, model.NewRegistry("template", model.Config{}), nil)
				runs, err := dead.claim(ctx, 1)
				require.NoError(t, err)
				require.Len(t, runs, 1)
				b.clock.Advance(2 * time.Minute)
				res, err := b.eng.RunPass(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, res.Exhausted)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.opts)
			b.workflow(t, "/w", tc.policy...)
			brief := tc.brief
			if brief == "" {
				brief = "a brief"
			}
			it := b.enqueue(t, EnqueueParams{Command: "/w", Payload: map[string]any{"title": "T", "brief": brief}})
			if tc.settle != nil {
				tc.settle(t, b, it)
			}
			r := b.waitRun(t, it.ID, EventRunFinished)
			require.Equal(t, tc.want, r.Status, r.Error)
			got := scrape(t, b.eng)
			total := 0.0
			for series, v := range got {
				if strings.HasPrefix(series, "holdfast_runs_finished_total{") {
					total += v
				}
			}
			require.Equal(t, 1.0, got[`holdfast_runs_finished_total{status="`+tc.want+`"}`], "the %s run is counted", tc.want)
			require.Equal(t, 1.0, total, "and counted once")
		})
	}
}
