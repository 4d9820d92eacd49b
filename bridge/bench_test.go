package bridge_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkHTTPEventsToInbox measures signed Events API deliveries through
// the real router and handler into the durable SQLite inbox, from concurrent
// senders as Slack's are: events/s and ack latency (p50, p99), with SQLite
// synchronous FULL (the default: each ack survives power loss) and NORMAL.
func BenchmarkHTTPEventsToInbox(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		b.Run("sync="+sync, func(b *testing.B) { benchEvents(b, sync) })
	}
}

func benchEvents(b *testing.B, syncMode string) {
	o := standIns()
	o.noStart = true // the ack path only: storing, not processing
	o.sync = syncMode
	tb := setup(b, o)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		seq  atomic.Int64
		mu   sync.Mutex
		lats []time.Duration
	)
	// 8 senders: RunParallel starts parallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			n := seq.Add(1)
			body := eventBody(fmt.Sprintf("EvB%d", n), message("C1", "U1", fmt.Sprintf("1700000000.%06d", n), "1.000001", "benchmark message"))
			ts := time.Now().Unix()
			req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/slack/events", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
			req.Header.Set("X-Slack-Signature", sign(ts, body))
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			resp.Body.Close()
			mine = append(mine, time.Since(t0))
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
		mu.Lock()
		lats = append(lats, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lats)
	if len(lats) > 0 {
		b.ReportMetric(float64(len(lats))/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
	}
	pending, err := tb.store.SlackInboxPending(tb.ctx, b.N+1)
	require.NoError(b, err)
	require.Len(b, pending, b.N, "every acknowledged event is in the inbox")
}
