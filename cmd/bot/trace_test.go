package main

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/store"
)

// otlpSpan is a span as an OTLP/HTTP receiver decoded it.
type otlpSpan struct {
	TraceID, SpanID, ParentID, Name string
	Attrs, Resource                 map[string]any
	Links                           []string // linked span ids
}

// otlpReceiver is a local OTLP/HTTP trace collector: it decodes every
// ExportTraceServiceRequest (protobuf, optionally gzipped) it is sent.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []otlpSpan
	requests int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var got []otlpSpan
		for _, rs := range req.GetResourceSpans() {
			res := kvs(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s := otlpSpan{TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
						ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(), Attrs: kvs(sp.GetAttributes()), Resource: res}
					for _, l := range sp.GetLinks() {
						s.Links = append(s.Links, hex.EncodeToString(l.GetSpanId()))
					}
					got = append(got, s)
				}
			}
		}
		rc.mu.Lock()
		rc.spans = append(rc.spans, got...)
		rc.requests++
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func kvs(in []*commonpb.KeyValue) map[string]any {
	out := map[string]any{}
	for _, kv := range in {
		out[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return out
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	}
	return nil
}

// find answers the received spans that match fn.
func (rc *otlpReceiver) find(fn func(s otlpSpan) bool) []otlpSpan {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []otlpSpan
	for _, s := range rc.spans {
		if fn(s) {
			out = append(out, s)
		}
	}
	return out
}

func (rc *otlpReceiver) trace(traceID string) map[string][]otlpSpan {
	out := map[string][]otlpSpan{}
	for _, s := range rc.find(func(s otlpSpan) bool { return s.TraceID == traceID }) {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

// slackFake is the part of Slack's Web API the bridge calls, recording posts.
type slackFake struct {
	*httptest.Server
	mu    sync.Mutex
	posts []map[string]string
}

func newSlackFake(t *testing.T) *slackFake {
	f := &slackFake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/auth.test":
			_, _ = io.WriteString(w, `{"ok":true,"user_id":"UBOT","bot_id":"BBOT"}`)
		case "/api/chat.postMessage", "/api/chat.update", "/api/chat.postEphemeral":
			f.mu.Lock()
			f.posts = append(f.posts, map[string]string{"method": r.URL.Path[5:], "channel": r.Form.Get("channel"),
				"thread_ts": r.Form.Get("thread_ts"), "text": r.Form.Get("text"), "blocks": r.Form.Get("blocks")})
			n := len(f.posts)
			f.mu.Unlock()
			fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":"1800000000.%06d","message_ts":"1800000000.%06d"}`, r.Form.Get("channel"), n, n)
		default:
			_, _ = io.WriteString(w, `{"ok":false,"error":"unknown_method"}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *slackFake) find(fn func(p map[string]string) bool) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.posts {
		if fn(p) {
			return p
		}
	}
	return nil
}

const traceSecret = "trace-signing-secret"

// slackPost sends a request signed as Slack signs them.
func slackPost(t *testing.T, url, contentType string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(traceSecret))
	fmt.Fprintf(mac, "v0:%s:%s", ts, body)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

var holdBlockRe = regexp.MustCompile(`"block_id":"hold:([^"]+)"`)

// TestBinaryTraces runs the real binary with a local OTLP/HTTP receiver.
func TestBinaryTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	t.Parallel()
	bin := bottest.Binary(t)

	// A Slack mention enqueues a held run, a steward approves it from its
	// card, the memo is dispatched and posted: one trace from the mention's
	// delivery to the post of the memo, with provenance and GenAI attributes.
	t.Run("MentionHeldApprovedDispatchedIsOneTrace", func(t *testing.T) {
		t.Parallel()
		recv := newOTLPReceiver(t)
		fake := newSlackFake(t)
		env := append(os.Environ(), "HOLDFAST_DB="+filepath.Join(t.TempDir(), "holdfast.db"), "HOLDFAST_ADMIN_PASSWORD=trace-test-pw",
			"SLACK_BOT_TOKEN=xoxb-1", "SLACK_SIGNING_SECRET="+traceSecret, "SLACK_API_URL="+fake.URL+"/api",
			"SLACK_STEWARDS=USTEWARD", "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
		p := bottest.Start(t, bin, env)

		root := "1700000000.000100"
		ev, _ := json.Marshal(map[string]any{"type": "event_callback", "event_id": "EvBinTrace", "event": map[string]any{
			"type": "app_mention", "channel": "C1", "user": "U1", "ts": root,
			"text": "<@UBOT> draft-memo Otters\nOtters hold hands while they sleep."}})
		require.Equal(t, http.StatusOK, slackPost(t, p.URL+"/slack/events", "application/json", ev))
		var card map[string]string
		require.Eventually(t, func() bool {
			card = fake.find(func(p map[string]string) bool { return strings.Contains(p["blocks"], `"hold_approve"`) })
			return card != nil
		}, 30*time.Second, 10*time.Millisecond, "the hold card is posted")
		m := holdBlockRe.FindStringSubmatch(card["blocks"])
		require.NotNil(t, m)
		holdID := m[1]
		click, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"},
			"channel":   map[string]any{"id": "C1"},
			"container": map[string]any{"type": "message", "channel_id": "C1", "message_ts": "1800000000.000003", "thread_ts": root},
			"message":   map[string]any{"ts": "1800000000.000003", "thread_ts": root},
			"actions": []any{map[string]any{"type": "button", "action_id": "hold_approve", "block_id": "hold:" + holdID,
				"value": holdID, "action_ts": "1700000001.000001"}}})
		require.Equal(t, http.StatusOK, slackPost(t, p.URL+"/slack/interactions", "application/x-www-form-urlencoded",
			[]byte(url.Values{"payload": {string(click)}}.Encode())))
		require.Eventually(t, func() bool {
			return fake.find(func(p map[string]string) bool { return strings.Contains(p["text"], "Memo dispatched") }) != nil
		}, 30*time.Second, 10*time.Millisecond, "the memo is posted into the thread")

		var tid string
		require.Eventually(t, func() bool {
			ds := recv.find(func(s otlpSpan) bool {
				return s.Name == "slack.delivery" && s.Attrs["slack.delivery.key"] == "app_mention:C1:"+root
			})
			if len(ds) == 0 {
				return false
			}
			tid = ds[0].TraceID
			for _, s := range recv.trace(tid)["slack.post"] {
				if strings.HasSuffix(s.Attrs["slack.outbox.key"].(string), ":lead") {
					return true
				}
			}
			return false
		}, 30*time.Second, 20*time.Millisecond, "the memo's post is exported in the mention's trace")

		spans := recv.trace(tid)
		for _, name := range []string{"slack.delivery", "workflow.enqueue", "workflow.run", "workflow.step", "chat template",
			"workflow.hold", "workflow.dispatch", "slack.post"} {
			require.NotEmpty(t, spans[name], "%s is in the trace", name)
		}
		require.Equal(t, "holdfast", spans["slack.delivery"][0].Resource["service.name"], "OTEL_SERVICE_NAME defaults to holdfast")
		require.Len(t, spans["workflow.run"], 2, "held, then resumed after the approval")
		var sessionID string
		for _, r := range spans["workflow.run"] {
			require.Equal(t, spans["workflow.enqueue"][0].SpanID, r.ParentID)
			require.Equal(t, "channel", r.Attrs["holdfast.session.origin"])
			require.Equal(t, "slack", r.Attrs["holdfast.session.platform"])
			require.Equal(t, "slack", r.Attrs["holdfast.surface"])
			require.Equal(t, "/draft-memo", r.Attrs["holdfast.workflow.command"])
			require.Equal(t, []any{"slack:C1:" + root}, r.Attrs["holdfast.session.tags"])
			sessionID, _ = r.Attrs["holdfast.session.id"].(string)
			require.NotEmpty(t, sessionID)
		}
		chat := spans["chat template"][0].Attrs
		require.Equal(t, "chat", chat["gen_ai.operation.name"])
		require.Equal(t, "template", chat["gen_ai.request.model"])
		require.Positive(t, chat["gen_ai.usage.input_tokens"])
		require.Positive(t, chat["gen_ai.usage.output_tokens"])
		require.Equal(t, holdID, spans["workflow.hold"][0].Attrs["holdfast.hold.id"])
		require.Len(t, spans["workflow.hold"][0].Links, 1, "linked to the click's delivery")

		p.Stop(t)
		require.Contains(t, p.Log(), "trace_id="+tid, "log lines carry the trace id")
	})

	// kill -9 while the run waits on its model; the next process recovers
	// the run, and its execution continues the trace of the API call that
	// enqueued it (here a client's own trace, sent as traceparent).
	t.Run("RecoveredAfterKill9ContinuesTheTrace", func(t *testing.T) {
		t.Parallel()
		recv := newOTLPReceiver(t)
		llm := fakellm.New(true)
		t.Cleanup(llm.Close)
		dir := t.TempDir()
		env := append(os.Environ(), "HOLDFAST_DB="+filepath.Join(dir, "holdfast.db"), "HOLDFAST_STUCK_RUN=2s",
			"HOLDFAST_ADMIN_PASSWORD=trace-test-pw", "OPENAI_BASE_URL="+llm.URL, "OPENAI_API_KEY=sk-test",
			"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
		wf := filepath.Join(dir, "crash.md")
		require.NoError(t, os.WriteFile(wf, []byte(strings.ReplaceAll(crashWorkflow, "¦", "`")), 0o644))
		bottest.CLI(t, bin, env, "workflow", "import", wf)
		key := bottest.AdminKey(t, bin, env, "trace")

		first := bottest.Start(t, bin, env)
		const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
		raw, _ := json.Marshal(map[string]any{"dedupeKey": "trace-1", "payload": map[string]any{"title": "T", "brief": "zqxtrace"}})
		req, err := http.NewRequest(http.MethodPost, first.URL+"/api/workflows/crash-draft/enqueue", bytes.NewReader(raw))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var enq struct{ Item struct{ ID string } }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&enq))
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)

		require.Eventually(t, func() bool { return llm.Calls() >= 1 && len(recv.trace(tid)["workflow.enqueue"]) == 1 },
			30*time.Second, 10*time.Millisecond, "the run waits on its model and the enqueue span is exported")
		enqueue := recv.trace(tid)["workflow.enqueue"][0]
		require.Equal(t, "00f067aa0ba902b7", enqueue.ParentID, "the enqueue continues the caller's trace")
		first.Kill(t)

		llm.Unblock()
		second := bottest.Start(t, bin, env)
		runID := store.RunIDForItem(enq.Item.ID)
		require.Eventually(t, func() bool {
			for _, s := range recv.trace(tid)["workflow.run"] {
				if s.Attrs["holdfast.run.id"] == runID && s.Attrs["holdfast.run.status"] == "succeeded" {
					return true
				}
			}
			return false
		}, 60*time.Second, 50*time.Millisecond, "the recovered run's execution is exported in the same trace")
		for _, s := range recv.trace(tid)["workflow.run"] {
			if s.Attrs["holdfast.run.status"] == "succeeded" {
				require.Equal(t, enqueue.SpanID, s.ParentID)
				require.Equal(t, int64(1), s.Attrs["holdfast.run.recovery_attempts"])
				require.Equal(t, "api", s.Attrs["holdfast.surface"])
			}
		}
		require.NotEmpty(t, recv.trace(tid)["chat crash-model"], "the retried model call is in the trace")
		second.Stop(t)
	})
}

// TestServeWithoutEndpointExportsNothing: with tracing off (no endpoint, or
// OTEL_TRACES_EXPORTER=none beside one) runs run and nothing is exported.
func TestServeWithoutEndpointExportsNothing(t *testing.T) {
	t.Parallel()
	recv := newOTLPReceiver(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"NoOTELVariables", map[string]string{}},
		{"ExporterNone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL, "OTEL_TRACES_EXPORTER": "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := map[string]string{"HOLDFAST_DB": filepath.Join(dir, "h.db"), "HOLDFAST_ADMIN_PASSWORD": "pw-pw-pw-pw"}
			for k, v := range tc.env {
				env[k] = v
			}
			url, _ := startServe(t, env)
			keyOut, err := runCLI(t, env, "", "apikey", "create", "--name", "k", "--role", "admin")
			require.NoError(t, err)
			key := strings.TrimSpace(keyOut[strings.LastIndex(strings.TrimSpace(keyOut), "\n")+1:])
			require.Equal(t, http.StatusCreated, bottest.JSON(t, http.MethodPost, url+"/api/workflows/weekly-digest/enqueue", key, map[string]any{"dedupeKey": "d"}, nil))
			var runs struct{ Runs []struct{ Status string } }
			require.Eventually(t, func() bool {
				return bottest.JSON(t, http.MethodGet, url+"/api/runs?status=succeeded", key, nil, &runs) == http.StatusOK && len(runs.Runs) == 1
			}, 20*time.Second, 10*time.Millisecond)
		})
	}
	t.Cleanup(func() {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		require.Zero(t, recv.requests, "nothing was exported")
	})
}
