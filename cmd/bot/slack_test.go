package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeSlackHTTPMode runs `bot serve` with Slack in HTTP mode against a
// minimal fake Web API: the /slack routes are mounted and verify signatures,
// a signed mention is answered in its thread, and the outbox shows in /metrics.
func TestServeSlackHTTPMode(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		posts []map[string]string
	)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/auth.test":
			_, _ = io.WriteString(w, `{"ok":true,"user_id":"UBOT","bot_id":"BBOT"}`)
		case "/api/chat.postMessage":
			mu.Lock()
			posts = append(posts, map[string]string{"channel": r.Form.Get("channel"), "thread_ts": r.Form.Get("thread_ts"), "text": r.Form.Get("text")})
			n := len(posts)
			mu.Unlock()
			fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":"1800000000.%06d"}`, r.Form.Get("channel"), n)
		default:
			_, _ = io.WriteString(w, `{"ok":false,"error":"unknown_method"}`)
		}
	}))
	t.Cleanup(fake.Close)
	const secret = "s3cret"
	url, _ := startServe(t, map[string]string{
		"HOLDFAST_DB": filepath.Join(t.TempDir(), "holdfast.db"), "HOLDFAST_INTERNAL_KEY": "ik",
		"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": secret, "SLACK_API_URL": fake.URL + "/api",
	})

	body, _ := json.Marshal(map[string]any{"type": "event_callback", "event_id": "Ev1", "event": map[string]any{
		"type": "app_mention", "channel": "C1", "user": "U1", "ts": "1700000000.000100", "text": "<@UBOT> help"}})
	post := func(sign bool) int {
		req, err := http.NewRequest(http.MethodPost, url+"/slack/events", bytes.NewReader(body))
		require.NoError(t, err)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "v0:%s:%s", ts, body)
		sig := "v0=" + hex.EncodeToString(mac.Sum(nil))
		if !sign {
			sig = "v0=" + strings.Repeat("0", 64)
		}
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post(false))
	require.Equal(t, http.StatusOK, post(true))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(posts) == 1 && posts[0]["thread_ts"] == "1700000000.000100" && strings.Contains(posts[0]["text"], "Holdfast")
	}, 10*time.Second, 10*time.Millisecond)

	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer ik")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "holdfast_slack_outbox_sent_total 1") &&
			strings.Contains(string(b), `holdfast_slack_inbox_received_total{kind="event",result="new"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
}
