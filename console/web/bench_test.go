package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// BenchmarkSessionsPage100k times the sessions page, server side (auth,
// listing query, view model, templ render), over 100,000 sessions of every
// origin, and reports the median as well as the mean.
func BenchmarkSessionsPage100k(b *testing.B) {
	bd := setup(b)
	ctx := context.Background()
	origins := []struct {
		tag, via string
	}{{"slack:C%d:1.%d", sessions.ViaSlack}, {"workflow:itm_%d_%d", sessions.ViaEngine}, {"", sessions.ViaConsole}, {"workflow:x%d_%d", sessions.ViaEngine}}
	for i := range 100_000 {
		o := origins[i%len(origins)]
		tag := ""
		if o.tag != "" {
			tag = fmt.Sprintf(o.tag, i, i)
		}
		_, err := bd.sess.Create(ctx, sessions.CreateParams{Title: fmt.Sprintf("Session %d about otters", i), Tag: tag,
			Capabilities: []string{"chat", "enqueue"}, Source: sessions.Source{Via: o.via},
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Actor: "U1", Payload: map[string]any{"text": "hi"}}}})
		require.NoError(b, err)
	}
	c := bd.signedIn(b, "viewer")
	cookie := c.http.Jar.Cookies(mustURL(b, bd.srv.URL))
	h := bd.srv.Config.Handler

	for _, bc := range []struct{ name, path string }{
		{"Default", "/sessions"},
		{"AllOrigins", "/sessions?origin=user,channel,workflow,api,agent"},
		{"Filtered", "/sessions?q=98+about"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, bc.path, nil)
				for _, ck := range cookie {
					req.AddCookie(ck)
				}
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, req)
				times = append(times, time.Since(start))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "session-row") {
					b.Fatalf("status %d", rec.Code)
				}
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
		})
	}
}

// history lays out n runs over the last 30 days through the store, as the
// runner would leave them: most succeeded, some failed or cancelled, and the
// newest `held` suspended at open holds (asked for by Slack users, so the
// admin may decide them). Titles and briefs vary; one run in ten is about
// otters.
func (bd *bundle) history(b *testing.B, n, held int) {
	b.Helper()
	ctx := context.Background()
	wf, err := bd.db.WorkflowGetByCommand(ctx, "/draft-memo")
	require.NoError(b, err)
	digest, err := bd.db.WorkflowGetByCommand(ctx, "/weekly-digest")
	require.NoError(b, err)
	subjects := []string{"herons", "kingfishers", "beavers", "voles", "dippers", "otters", "grebes", "newts", "eels", "swifts"}
	start := time.Now().Add(-30 * 24 * time.Hour)
	step := 30 * 24 * time.Hour / time.Duration(n)
	const batch = 500
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for base := 0; base < n; base += batch {
		for i := base; i < min(base+batch, n); i++ {
			w, cmd := wf, "/draft-memo"
			if i%4 == 3 {
				w, cmd = digest, "/weekly-digest"
			}
			s := subjects[i%len(subjects)]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, _, err := bd.db.QueueItemInsert(ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), OwnerUID: fmt.Sprintf("slack:U%d", i%50),
					WorkflowMemoID: w.MemoID, Command: cmd, DedupeKey: fmt.Sprint(i),
					Payload: map[string]any{"title": fmt.Sprintf("Survey %d of the %s", i, s), "brief": fmt.Sprintf("Count the %s at site %d.", s, i%97)}})
				if err != nil {
					panic(err)
				}
			}()
		}
		wg.Wait()
		pending, err := bd.db.QueueItemListPending(ctx, batch)
		require.NoError(b, err)
		claims := make([]store.ItemClaim, len(pending))
		for j, it := range pending {
			claims[j] = store.ItemClaim{ItemID: it.ID}
		}
		runs, err := bd.db.QueueItemClaim(ctx, &store.QueueItemClaimParams{RunnerID: "bench", Claims: claims, Now: start.Add(time.Duration(base) * step)})
		require.NoError(b, err)
		for j, r := range runs {
			i := base + j
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				var err error
				switch {
				case i >= n-held:
					_, err = bd.db.RunSuspend(ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: r.ID, Lease: r.Lease},
						Hold: &store.Hold{ID: store.HoldIDForRun(r.ID), ItemID: r.ItemID, OwnerUID: r.OwnerUID, Command: r.Command,
							GateLabel: "Review draft", Preview: "# " + fmt.Sprint(r.Payload["title"]), Output: "# " + fmt.Sprint(r.Payload["title"]),
							RequiredApprovals: 1}})
				case i%17 == 0:
					_, err = bd.db.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunFailed,
						ErrorKind: "model", Error: "the model answered 500"})
				case i%23 == 0:
					_, err = bd.db.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunCancelled,
						ErrorKind: "cancelled", Error: "rejected by ada: off topic"})
				default:
					_, err = bd.db.RunSettle(ctx, &store.RunSettleParams{RunID: r.ID, Lease: r.Lease, Status: store.RunSucceeded})
				}
				if err != nil {
					panic(err)
				}
			}()
		}
		wg.Wait()
	}
}

// serveMedian times GET path through the whole console (auth, queries, view
// model, templ render) and reports the median.
func serveMedian(b *testing.B, bd *bundle, cookie []*http.Cookie, path, want string) {
	h := bd.srv.Config.Handler
	var times []time.Duration
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for _, ck := range cookie {
			req.AddCookie(ck)
		}
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		times = append(times, time.Since(start))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			b.Fatalf("%s: status %d, %q not in the page", path, rec.Code, want)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
}

// BenchmarkConsole100kRuns times Home and the Runs list over 100,000 runs
// (30 days of them) and 10,000 open holds.
func BenchmarkConsole100kRuns(b *testing.B) {
	bd := setupBundle(b, nil, false)
	bd.history(b, 100_000, 10_000)
	c := bd.signedIn(b, "admin")
	cookie := c.http.Jar.Cookies(mustURL(b, bd.srv.URL))
	for _, bc := range []struct{ name, path, want string }{
		{"Home", "/", `id="runs-chart"`},
		{"Runs", "/runs", `id="runs"`},
		{"RunsText", "/runs?q=otters", "of the otters"},
		{"RunsTextRare", "/runs?q=site+42.", "site 42."},
		{"RunsTextAndStatus", "/runs?q=voles&status=failed", "of the voles"},
		{"RunsWorkflow", "/runs?workflow=weekly-digest", `id="runs"`},
		{"Holds", "/holds", `id="open-holds-list"`},
	} {
		b.Run(bc.name, func(b *testing.B) { serveMedian(b, bd, cookie, bc.path, bc.want) })
	}
}
