package bridge_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	hfapi "github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/console/server"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/storetest"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

// testBundle is one bridge on a real SQLite store behind the real router,
// talking to a fake Slack.
type testBundle struct {
	ctx     context.Context
	store   store.Store
	slack   *fakeslack.Server
	bridge  *bridge.Bridge
	signals *bridge.TestSignals
	srv     *httptest.Server
	engine  bridge.Engine
	seq     atomic.Int64

	// set up with real: the real engine, sessions runtime and API
	eng      *engine.Engine
	lib      *library.Service
	sessions *sessions.Service
	keys     map[string]string // API key by role
}

type setupOpts struct {
	// real runs the real engine (stewards: USTEWARD, USTEWARD2) and API with the
	// example workflows; otherwise engine builds a stand-in.
	real   bool
	engine func(tb *testBundle) bridge.Engine
	// wrap, with real, wraps the engine the bridge calls.
	wrap    func(bridge.Engine) bridge.Engine
	cfg     func(c *bridge.Config)
	noStart bool
	sync    string // SQLite synchronous (default full)
	// tracer, when set, traces the bridge, engine, sessions and models.
	tracer trace.TracerProvider
	// openai is the base URL openai:<model> workflows call.
	openai string
	// engineCfg, with real, adjusts the engine's config (a test clock).
	engineCfg func(c *engine.Config)
	// bridgeStore wraps the store the bridge (only) reads and writes.
	bridgeStore func(store.Store) store.Store
}

func setup(t testing.TB, o setupOpts) *testBundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	db := testdb.Open(t, testdb.Options{SQLiteSync: o.sync})
	log := discard()
	tb := &testBundle{ctx: ctx, store: db, slack: fakeslack.New(t), keys: map[string]string{}}
	api := slack.New("xoxb-test", slack.OptionAPIURL(tb.slack.APIURL()))
	cfg := bridge.Config{SigningSecret: secret, BaseURL: "http://holdfast.test", Tick: 200 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, InboxRetry: 10 * time.Millisecond,
		Signals: bridge.NewTestSignals()}
	tb.signals = cfg.Signals
	cfg.Tracer = o.tracer
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	models := model.NewRegistry("template", model.Config{Tracer: o.tracer, OpenAIBaseURL: o.openai, OpenAIAPIKey: "sk-test"})
	deps := server.Deps{Store: db}
	var sesEngine sessions.Engine
	if o.real {
		lib := library.New(db, log)
		require.NoError(t, lib.SeedExamples(ctx))
		ecfg := engine.Config{Workers: 2, SlackStewards: []string{"USTEWARD", "USTEWARD2"},
			DisableScheduler: true, PassInterval: time.Second, Tracer: o.tracer}
		if o.engineCfg != nil {
			o.engineCfg(&ecfg)
		}
		tb.eng = engine.New(ecfg, db, models, log)
		tb.lib = lib
		tb.engine = tb.eng
		if o.wrap != nil {
			tb.engine = o.wrap(tb.engine)
		}
		sesEngine = tb.eng
		for _, role := range []string{store.RoleViewer, store.RoleSteward} {
			key, hash := auth.NewAPIKey()
			_, err := db.APIKeyCreate(ctx, &store.APIKey{Name: role, Role: role, KeyHash: hash})
			require.NoError(t, err)
			tb.keys[role] = key
		}
	} else {
		tb.engine = o.engine(tb)
	}
	tb.sessions = sessions.New(db, sessions.Config{DefaultPolicy: "auto", Models: models, DefaultModel: "template", Tracer: o.tracer},
		sesEngine, log)
	var bst store.Store = db
	if o.bridgeStore != nil {
		bst = o.bridgeStore(db)
	}
	tb.bridge = bridge.New(cfg, bst, api, tb.engine, tb.sessions, log)
	deps.Slack = tb.bridge.Handler()
	if o.real {
		console := web.New(web.Deps{Store: db, Library: tb.lib, Sessions: tb.sessions, Engine: tb.eng, Log: log, BaseURL: "http://holdfast.test"})
		deps.API = hfapi.New(hfapi.Deps{Store: db, Log: log, Engine: tb.eng, Sessions: tb.sessions, Cookie: console.Cookie, CSRF: console.CSRF})
		deps.Console = console.Handler()
	}
	tb.srv = httptest.NewServer(server.Handler(deps))

	var wg sync.WaitGroup
	if o.real {
		wg.Go(func() { _ = tb.eng.Start(ctx) })
	}
	if !o.noStart {
		wg.Go(func() { _ = tb.bridge.Start(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		tb.sessions.Close()
		tb.srv.Close()
	})
	return tb
}

// eventually waits until cond holds, failing the test after timeout. cond
// runs on the test goroutine, now and again after every unit of work the
// bridge finishes and every call Slack answers: it waits on those signals,
// not on a poll interval.
func (tb *testBundle) eventually(t testing.TB, cond func() bool, timeout time.Duration, msgAndArgs ...any) {
	t.Helper()
	storetest.Wait(t, cond, timeout, []func() <-chan struct{}{tb.slack.Changed, tb.signals.Changed}, msgAndArgs...)
}

// waitSlack is eventually for a bridge in another process, whose work
// signals nothing here: cond is checked after every call fake Slack answers.
func waitSlack(t testing.TB, fake *fakeslack.Server, cond func() bool, timeout time.Duration, msgAndArgs ...any) {
	t.Helper()
	storetest.Wait(t, cond, timeout, []func() <-chan struct{}{fake.Changed}, msgAndArgs...)
}

// externalPoll is how often a test polls what only another process
// changes and no signal reaches (its database rows after Slack answered).
const externalPoll = 10 * time.Millisecond

// sign signs body exactly as Slack does: v0=hex(HMAC-SHA256(secret, "v0:<ts>:<body>")).
func sign(ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// post sends a signed request to path and answers the status and body.
func (tb *testBundle) post(t testing.TB, path, contentType string, body []byte) (int, string) {
	t.Helper()
	return tb.postSigned(t, path, contentType, body, time.Now().Unix(), "")
}

func (tb *testBundle) postSigned(t testing.TB, path, contentType string, body []byte, ts int64, sig string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	if sig == "" {
		sig = sign(ts, body)
	}
	req.Header.Set("X-Slack-Signature", sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// event posts an Events API callback and requires a 200 ack.
func (tb *testBundle) event(t *testing.T, eventID string, inner map[string]any) {
	t.Helper()
	status, body := tb.post(t, "/slack/events", "application/json", eventBody(eventID, inner))
	require.Equal(t, http.StatusOK, status, body)
}

func eventBody(eventID string, inner map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"token": "ignored", "team_id": fakeslack.TeamID, "api_app_id": "A1", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": inner,
		"authorizations": []any{map[string]any{"user_id": fakeslack.BotUserID, "is_bot": true, "team_id": fakeslack.TeamID}},
	})
	return b
}

// ts issues a message ts unique within the test.
func (tb *testBundle) ts() string {
	return fmt.Sprintf("1700000000.%06d", tb.seq.Add(1))
}

func mention(channel, user, ts, threadTS, text string) map[string]any {
	m := map[string]any{"type": "app_mention", "channel": channel, "user": user, "ts": ts,
		"text": "<@" + fakeslack.BotUserID + "> " + text, "event_ts": ts}
	if threadTS != "" {
		m["thread_ts"] = threadTS
	}
	return m
}

func message(channel, user, ts, threadTS, text string) map[string]any {
	m := map[string]any{"type": "message", "channel": channel, "channel_type": "channel", "user": user, "ts": ts,
		"text": text, "event_ts": ts}
	if threadTS != "" {
		m["thread_ts"] = threadTS
	}
	return m
}

// click posts a hold card button click as Slack's interactivity does.
func (tb *testBundle) click(t *testing.T, user, actionID, holdID, channel, messageTS, threadTS string) int {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user, "username": "u-" + user},
		"channel":    map[string]any{"id": channel},
		"container":  map[string]any{"type": "message", "channel_id": channel, "message_ts": messageTS, "thread_ts": threadTS},
		"message":    map[string]any{"ts": messageTS, "thread_ts": threadTS},
		"trigger_id": fmt.Sprint(time.Now().UnixNano()),
		"actions": []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "hold:" + holdID,
			"value": holdID, "action_ts": fmt.Sprint(time.Now().UnixNano())}},
	})
	status, _ := tb.post(t, "/slack/interactions", "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(payload)}}.Encode()))
	return status
}

// posts answers the delivered chat.postMessage calls into a thread.
func (tb *testBundle) posts(channel, threadTS string) []fakeslack.Call {
	var out []fakeslack.Call
	for _, c := range tb.slack.Delivered("chat.postMessage") {
		if c.Form["channel"] == channel && c.Form["thread_ts"] == threadTS {
			out = append(out, c)
		}
	}
	return out
}

// waitPost waits for a delivered post into the thread matching fn.
func (tb *testBundle) waitPost(t *testing.T, channel, threadTS string, fn func(c fakeslack.Call) bool) fakeslack.Call {
	t.Helper()
	var found fakeslack.Call
	tb.eventually(t, func() bool {
		for _, c := range tb.posts(channel, threadTS) {
			if fn(c) {
				found = c
				return true
			}
		}
		return false
	}, 10*time.Second, "no matching post in %s/%s; posts: %v", channel, threadTS, tb.slack.Calls(""))
	return found
}

// inboxDrained waits until every stored delivery is processed.
func (tb *testBundle) inboxDrained(t *testing.T) {
	t.Helper()
	tb.eventually(t, func() bool {
		p, err := tb.store.SlackInboxPending(tb.ctx, 1)
		return err == nil && len(p) == 0
	}, 10*time.Second)
}

// idle waits until the bridge has nothing left to do: every delivery
// processed, every Slack session event mirrored, every outbox message
// settled. A "nothing else was posted" assertion must wait for this first.
func (tb *testBundle) idle(t *testing.T) {
	t.Helper()
	tb.eventually(t, func() bool {
		if p, err := tb.store.SlackInboxPending(tb.ctx, 1); err != nil || len(p) > 0 {
			return false
		}
		cur, err := tb.store.SlackMirrorCursor(tb.ctx)
		if err != nil {
			return false
		}
		if evs, err := tb.store.SlackMirrorEvents(tb.ctx, cur, 1); err != nil || len(evs) > 0 {
			return false
		}
		_, err = tb.store.SlackOutboxNextDue(tb.ctx)
		return errors.Is(err, store.ErrNotFound)
	}, 10*time.Second, "the bridge goes idle")
}

// inboxPendingIs waits until exactly n deliveries are unprocessed.
func (tb *testBundle) inboxPendingIs(t *testing.T, n int) {
	t.Helper()
	tb.eventually(t, func() bool {
		p, err := tb.store.SlackInboxPending(tb.ctx, 100)
		return err == nil && len(p) == n
	}, 10*time.Second)
}

func blocksOf(t *testing.T, c fakeslack.Call) []map[string]any {
	t.Helper()
	var bl []map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.Form["blocks"]), &bl), c.Form["blocks"])
	return bl
}

func apiFor(tb *testBundle) *slack.Client {
	return slack.New("xoxb-test", slack.OptionAPIURL(tb.slack.APIURL()))
}

// discard is the test logger: silent unless HOLDFAST_TEST_LOG is set.
func discard() *slog.Logger {
	if os.Getenv("HOLDFAST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// runBridge starts b until the test ends.
func runBridge(t *testing.T, tb *testBundle, b *bridge.Bridge) {
	ctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// text is everything a call shows: its text and its blocks' JSON with
// JSON's HTML escapes undone, so assertions read as Slack renders.
func text(c fakeslack.Call) string {
	return c.Form["text"] + "\n" + strings.NewReplacer(`\u0026`, "&", `\u003c`, "<", `\u003e`, ">").Replace(c.Form["blocks"])
}

// addWorkflow indexes a workflow memo so its command routes to an enqueue.
func (tb *testBundle) addWorkflow(t testing.TB, command, status, summary string) {
	t.Helper()
	_, err := tb.store.MemoCreate(tb.ctx, &store.MemoCreateParams{Title: command, Body: "x", MemoType: store.MemoTypeWorkflow,
		Workflow: &store.WorkflowIndex{Command: command, Status: status, Summary: summary}})
	require.NoError(t, err)
}
