package bridge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/engine/sessions"
)

// BenchmarkReviewClickAck measures what Slack waits for when a steward
// clicks "Comment or edit…": the signed block_actions request through the
// real router until its 200, which comes after the modal was opened with
// views.open on the fake Slack (the hold read, the steward check and the
// call all happen before the ack). Concurrent clickers; p50 and p99.
func BenchmarkReviewClickAck(b *testing.B) {
	o := standIns()
	eng := newRecordingEngine()
	eng.stewards["USTEWARD"] = true
	o.engine = func(*testBundle) bridge.Engine { return eng }
	tb := setup(b, o)
	ses, err := tb.sessions.ResolveTag(tb.ctx, "slack:CB:1700000001.000001", sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaSlack}})
	require.NoError(b, err)
	holdID := tb.openHold(b, ses.ID)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		seq  atomic.Int64
		mu   sync.Mutex
		lats []time.Duration
	)
	before := len(tb.slack.Views())
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			n := seq.Add(1)
			payload, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"},
				"trigger_id": fmt.Sprintf("trig-%d", n), "channel": map[string]any{"id": "CB"},
				"container": map[string]any{"type": "message", "channel_id": "CB", "message_ts": "1700000001.000002", "thread_ts": "1700000001.000001"},
				"message":   map[string]any{"ts": "1700000001.000002", "thread_ts": "1700000001.000001"},
				"actions": []any{map[string]any{"action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID,
					"action_ts": strconv.FormatInt(n, 10)}}})
			body := []byte(url.Values{"payload": {string(payload)}}.Encode())
			ts := time.Now().Unix()
			req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/slack/interactions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
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
	b.StopTimer()
	require.Len(b, tb.slack.Views(), before+b.N, "every click opened its modal before its ack")
	slices.Sort(lats)
	if len(lats) > 0 {
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
	}
}
