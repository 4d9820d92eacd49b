package web_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// browser is one headless Chromium tab with its console watched: any
// JavaScript exception or console error fails the test.
type browser struct {
	t        *testing.T
	ctx      context.Context
	base     string
	shots    string
	mu       sync.Mutex
	errs     []string
	expected []string // substrings of console errors a test provokes on purpose
	counter  int
}

// expectConsoleError lets one provoked console error through (e.g. the 403
// of a refused request made on purpose).
func (b *browser) expectConsoleError(substr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expected = append(b.expected, substr)
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// screenshotDir is $HOLDFAST_SCREENSHOTS when set (kept after the run),
// else a temp dir.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("HOLDFAST_SCREENSHOTS"); d != "" {
		d = filepath.Join(d, t.Name())
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// newBrowser starts Chromium. Browser tests skip only when Chromium is
// absent and CI is unset: on CI they must run.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed, and browser tests must run on CI")
		}
		browserSkips.add(t.Name())
		t.Skip(noChromium)
	}
	profile, err := os.MkdirTemp("", "holdfast-chromium-")
	require.NoError(t, err)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 800),
	)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	b := &browser{t: t, ctx: ctx, base: base, shots: screenshotDir(t)}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				line := fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line)
				b.mu.Lock()
				ok := false
				for _, e := range b.expected {
					ok = ok || strings.Contains(line, e)
				}
				if !ok {
					b.errs = append(b.errs, line)
				}
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
		<-done
		_ = os.RemoveAll(profile)
		b.mu.Lock()
		defer b.mu.Unlock()
		require.Empty(t, b.errs, "the browser console reported errors")
	})
	b.do(chromedp.EmulateViewport(1280, 800))
	return b
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, actions...))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err)
	return s
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	require.NoError(b.t, err)
	return n
}

// eventually polls a JavaScript condition until it is true.
func (b *browser) eventually(expr, msg string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
		return err == nil && ok
	}, 20*time.Second, 100*time.Millisecond, msg)
}

func (b *browser) open(path, waitFor string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(waitFor)))
}

// signIn signs in from the form, landing on next.
func (b *browser) signIn(username, next string) {
	b.t.Helper()
	b.open("/login?next="+next, "#username")
	b.do(
		chromedp.SendKeys(chromedp.ID("username"), username),
		chromedp.SendKeys(chromedp.ID("password"), testPassword),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("header .who")),
	)
}

func (b *browser) signOut() {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(".who button")), chromedp.WaitVisible(chromedp.ID("username")))
}

// screenshot saves the viewport at desktop (1280×800) and phone (390×844)
// sizes, then restores the desktop size.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.counter++
	for _, size := range []struct {
		label string
		w, h  int64
		opts  []chromedp.EmulateViewportOption
	}{
		{"desktop", 1280, 800, nil},
		{"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile}},
	} {
		b.do(chromedp.EmulateViewport(size.w, size.h, size.opts...))
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		require.NoError(b.t, err)
		file := filepath.Join(b.shots, fmt.Sprintf("%02d-%s-%s.png", b.counter, name, size.label))
		require.NoError(b.t, os.WriteFile(file, png, 0o644))
	}
	b.do(chromedp.EmulateViewport(1280, 800))
}

func TestBrowserLibraryPages(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	b := newBrowser(t, bd.srv.URL)

	b.open("/login", "#username")
	b.screenshot("login")
	b.signIn("admin", "/workflows")

	b.open("/workflows", "#workflows")
	require.Contains(t, b.text("#workflows"), "/draft-memo")
	b.screenshot("workflows")
	b.do(chromedp.Click(chromedp.CSS(`a[href="/workflows/draft-memo"]`)), chromedp.WaitVisible(chromedp.CSS(".source")))
	b.screenshot("workflow")

	b.open("/memos", "#memos")
	b.screenshot("memos")
	b.do(chromedp.Click(chromedp.CSS("#memos a.title")), chromedp.WaitVisible(chromedp.ID("memo-body")))
	b.screenshot("memo")

	b.open("/users", "#users")
	b.screenshot("users")
	require.True(t, strings.Contains(b.text("#users"), "steward"))
	b.expectConsoleError("/memos/mem_missing") // the 404 itself is logged by the browser
	b.open("/memos/mem_missing", ".empty")
	require.Contains(t, b.text("main"), "Not found")
	b.screenshot("not-found")
}

// TestBrowserStewardFlow drives the console as a steward and a viewer do.
func TestBrowserStewardFlow(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	ctx := context.Background()
	slack := bd.session(t, "Launch checklist", "slack:C042:1700000000.0001", sessions.ViaSlack)
	_, err := bd.sess.AppendEvent(ctx, slack.ID, store.EventAssistantMessage, "holdfast",
		map[string]any{"text": "Here is the **checklist** so far:\n\n1. Draft the memo\n2. Review it"})
	require.NoError(t, err)
	bd.session(t, "Console chat about herons", "", sessions.ViaConsole)
	item, hold := bd.heldRun(t, "slack:U9", "Quarterly otter census")
	_, other := bd.heldRun(t, "slack:U9", "Heron nesting report")

	b := newBrowser(t, bd.srv.URL)
	b.signIn("steward", "/sessions")

	// Origin toggles: workflow sessions appear and disappear.
	b.do(chromedp.WaitVisible(chromedp.ID("sessions")))
	require.Zero(t, b.count(`.session-row[data-origin="workflow"]`), "workflow sessions are hidden by default")
	require.Equal(t, 1, b.count(`.session-row[data-origin="channel"] .badge.slack`))
	b.screenshot("sessions")
	b.do(chromedp.Click(chromedp.CSS(`a.toggle[data-origin="workflow"]`)))
	b.eventually(`document.querySelectorAll('.session-row[data-origin="workflow"]').length === 2`, "workflow sessions appear")
	require.Contains(t, b.text(`a.toggle[data-origin="workflow"]`), "workflow")
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, loc, "origin=user%2Cchannel%2Cworkflow", "the choice is kept in the URL")
	b.screenshot("sessions-with-workflow")
	b.do(chromedp.Click(chromedp.CSS(`a.toggle[data-origin="workflow"]`)))
	b.eventually(`document.querySelectorAll('.session-row[data-origin="workflow"]').length === 0 && document.querySelectorAll('.session-row').length === 2`,
		"workflow sessions disappear, the others stay")

	// A Slack session: a message arrives live.
	b.do(chromedp.Click(chromedp.CSS(`a[href="/sessions/`+slack.ID+`"]`)), chromedp.WaitVisible(chromedp.ID("transcript")))
	require.Contains(t, b.text("#transcript"), "checklist")
	require.Zero(t, b.count(`textarea[name="text"]`), "a Slack session is answered in Slack")
	_, err = bd.sess.AppendEvent(ctx, slack.ID, store.EventUserMessage, "slack:U42", map[string]any{"text": "Can we add a rollback step?"})
	require.NoError(t, err)
	b.eventually(`document.getElementById('transcript').innerText.includes('Can we add a rollback step?')`, "the new message appears without a reload")
	b.screenshot("session-slack")

	// A console session: start one, write to it, the reply arrives live.
	b.open("/sessions", "#sessions")
	b.do(
		chromedp.SendKeys(chromedp.ID("new-title"), "Browser chat"),
		chromedp.Click(chromedp.CSS(`form[action="/sessions"] button`)),
		chromedp.WaitVisible(chromedp.ID("message")),
		chromedp.SendKeys(chromedp.ID("message"), "What can you do?"),
		chromedp.Click(chromedp.CSS(`form.composer button`)),
		chromedp.WaitVisible(chromedp.ID("transcript")),
	)
	b.eventually(`document.querySelectorAll('#transcript .event[data-type="assistant_message"]').length === 1`, "the reply arrives")
	require.Contains(t, b.text("#transcript"), "What can you do?")
	b.eventually(`document.getElementById('session-status').innerText.trim() === 'done'`, "the status follows the turn")
	b.screenshot("session-user")

	// The workflow session shows the run and its hold card inline.
	b.open("/sessions/"+item.SessionID, "#transcript")
	require.Equal(t, 1, b.count(`.event[data-type="hold_opened"] .holdcard`))
	b.screenshot("session-workflow")

	// Approve a hold with a comment and watch the run finish.
	b.open("/holds", "#open-holds")
	require.Equal(t, 2, b.count(`#open-holds article.hold`))
	b.screenshot("holds")
	b.open("/holds/"+hold.ID, "#hold-"+hold.ID)
	b.screenshot("hold")
	b.do(
		chromedp.SendKeys(chromedp.ID("comment-"+hold.ID), "Numbers check out"),
		chromedp.Click(chromedp.CSS(`#hold-`+hold.ID+` button[value="approve"]`)),
		chromedp.WaitVisible(chromedp.ID("run-status")),
	)
	b.eventually(`document.getElementById('run-status').innerText.trim() === 'succeeded'`, "the run page shows the run finish")
	require.Contains(t, b.text("#dispatch"), "Quarterly otter census")
	require.Contains(t, b.text("main"), "Numbers check out")
	b.screenshot("run")
	b.open("/runs", "#runs")
	b.screenshot("runs")
	b.open("/edges", "#edges")
	b.screenshot("edges")
	b.open("/memos", "#memos")
	b.screenshot("memos")
	b.do(chromedp.Click(chromedp.CSS(`#memos a.title`)), chromedp.WaitVisible(chromedp.ID("memo-body")))
	b.screenshot("memo")
	b.open("/workflows", "#workflows")
	b.screenshot("workflows")
	b.open("/workflows/draft-memo", ".source")
	b.screenshot("workflow")

	// A viewer sees no decision controls and is refused if they try.
	b.signOut()
	b.signIn("viewer", "/holds/"+other.ID)
	b.do(chromedp.WaitVisible(chromedp.ID("hold-" + other.ID)))
	require.Zero(t, b.count(`button[name="decision"]`), "a viewer never sees decide buttons")
	require.Zero(t, b.count(`form.decide`))
	b.screenshot("hold-viewer")
	b.expectConsoleError("/holds/" + other.ID + "/decision")
	status, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`fetch('/holds/`+other.ID+`/decision', {method: 'POST',
		headers: {'Content-Type': 'application/x-www-form-urlencoded'},
		body: 'decision=approve&csrf_token=' + encodeURIComponent(document.querySelector('meta[name="csrf-token"]').content)}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
	h, err := bd.db.HoldGetByID(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status, "the viewer's attempt changed nothing")
}
