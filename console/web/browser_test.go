package web_test

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
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

// step runs fn as a subtest of t on this browser, which its helpers then
// report to; a failed step ends t, whose later steps build on it.
func (b *browser) step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	parent := b.t
	ok := t.Run(name, func(t *testing.T) {
		b.t = t
		defer func() { b.t = parent }()
		fn(t)
	})
	if !ok {
		t.FailNow()
	}
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

//go:embed testdata/axe/axe.min.js
var axeSource string

// axeRun runs axe-core's WCAG 2.1 A and AA rules on the page and answers the
// critical and serious violations, each with a few of its nodes.
const axeRun = `axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
	resultTypes: ['violations']}).then(r => r.violations
	.filter(v => v.impact === 'critical' || v.impact === 'serious')
	.map(v => ({id: v.id, impact: v.impact, help: v.help,
		nodes: v.nodes.slice(0, 6).map(n => n.target.join(' ') + ': ' + (n.failureSummary || '').replace(/\s+/g, ' '))})))`

type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// sizes are the two viewports every page is checked and shot at.
var sizes = []struct {
	label string
	w, h  int64
	opts  []chromedp.EmulateViewportOption
}{
	{"desktop", 1280, 800, nil},
	{"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile}},
}

// check is what every page gets: at desktop (1280×800) and phone (390×844)
// sizes, axe-core finds no critical or serious WCAG 2.1 A/AA violation, the
// page is no wider than the window (nothing scrolls sideways but a table
// region made to), and a full-page screenshot is saved (kept when
// HOLDFAST_SCREENSHOTS is set).
// The desktop size is restored after.
func (b *browser) check(name string) {
	b.t.Helper()
	b.counter++
	for _, size := range sizes {
		b.do(chromedp.EmulateViewport(size.w, size.h, size.opts...))
		loaded, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`typeof axe === 'object'`))
		require.NoError(b.t, err)
		if !loaded {
			_, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](axeSource+"\n;true"))
			require.NoError(b.t, err, "axe-core loads")
		}
		vs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]axeViolation](axeRun, chromedp.EvalAwaitPromise))
		require.NoError(b.t, err)
		var report strings.Builder
		for _, v := range vs {
			fmt.Fprintf(&report, "\n  %s (%s): %s", v.ID, v.Impact, v.Help)
			for _, n := range v.Nodes {
				fmt.Fprintf(&report, "\n    - %s", n)
			}
		}
		require.Empty(b.t, vs, "%s at %s (%dx%d): axe-core finds critical or serious WCAG 2.1 A/AA violations:%s",
			name, size.label, size.w, size.h, report.String())
		overflow, err := chromedp.Run(b.ctx, chromedp.Evaluate[int64](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
		require.NoError(b.t, err)
		require.LessOrEqual(b.t, overflow, int64(0), "%s at %s (%dx%d): the page is %d px wider than the window", name, size.label, size.w, size.h, overflow)
		png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		require.NoError(b.t, err)
		file := filepath.Join(b.shots, fmt.Sprintf("%02d-%s-%s.png", b.counter, name, size.label))
		require.NoError(b.t, os.WriteFile(file, png, 0o644))
	}
	b.do(chromedp.EmulateViewport(1280, 800))
}

// value reads a form field's current value.
func (b *browser) value(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf("document.querySelector(%q).value", sel)))
	require.NoError(b.t, err)
	return v
}

// location is the tab's current URL.
func (b *browser) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(b.t, err)
	return loc
}

// TestBrowserLibraryPages covers the library and admin pages: every one
// passes the accessibility check at both sizes.
func TestBrowserLibraryPages(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	b := newBrowser(t, bd.srv.URL)

	b.open("/login", "#username")
	b.check("login")
	b.signIn("admin", "/workflows")

	b.open("/workflows", "#workflows")
	require.Contains(t, b.text("#workflows"), "/draft-memo")
	b.check("workflows")
	b.do(chromedp.Click(chromedp.CSS(`a[href="/workflows/draft-memo"]`)), chromedp.WaitVisible(chromedp.CSS(".source")))
	b.check("workflow")

	b.open("/memos", "#memos")
	b.check("memos")
	// The search box is usable: wide enough to read what is typed.
	for _, size := range sizes {
		b.do(chromedp.EmulateViewport(size.w, size.h, size.opts...))
		width, err := chromedp.Run(b.ctx, chromedp.Evaluate[float64](`document.getElementById('mq').getBoundingClientRect().width`))
		require.NoError(t, err)
		require.Greater(t, width, 200.0, "the memo search box at %s is %v px wide", size.label, width)
	}
	b.do(chromedp.EmulateViewport(1280, 800))
	b.do(chromedp.SendKeys(chromedp.ID("mq"), "style"), chromedp.Click(chromedp.CSS(".memo-search button")))
	b.eventually(`location.search.includes('q=style') && document.readyState === 'complete' && !!document.querySelector('#memos a.title')`,
		"the search lands on its results")
	require.Contains(t, b.text("#memos"), "Style guide")
	// A refused search answers 400 (SPEC §8), which the browser reports.
	b.expectConsoleError("status of 400 (Bad Request) (" + b.base + "/memos?q=limit%3A100+style")
	b.open("/memos?q=limit%3A100+style", "#search-error")
	require.Contains(t, b.text("#search-error"), "limit:100")
	b.check("memos-refused")
	b.open("/memos?q=style", "#memos")
	b.do(chromedp.Click(chromedp.CSS("#memos a.title")), chromedp.WaitVisible(chromedp.ID("memo-body")))
	b.check("memo")
	b.do(chromedp.Click(chromedp.CSS(`a.button[href$="/edit"]`)), chromedp.WaitVisible(chromedp.ID("me-body")))
	b.check("memo-edit")

	// A compare-and-set conflict: someone saves first; the page shows both.
	memoID := strings.TrimSuffix(strings.TrimPrefix(b.location(), bd.srv.URL+"/memos/"), "/edit")
	m, err := bd.db.MemoGetByID(context.Background(), memoID)
	require.NoError(t, err)
	body := "Someone else's rewrite."
	_, err = bd.lib.Update(context.Background(), library.UpdateParams{ID: m.ID, ExpectedVersion: m.ContentVersion, Body: body})
	require.NoError(t, err)
	b.do(chromedp.SetValue(chromedp.ID("me-body"), m.Body+"\n\nMy addition."), chromedp.Click(chromedp.CSS("#memo-edit button.primary")),
		chromedp.WaitVisible(chromedp.ID("conflict")))
	require.Contains(t, b.text("#current-version"), "Someone else's rewrite.")
	require.Contains(t, b.value("#me-body"), "My addition.", "the losing text is kept")
	b.check("memo-conflict")

	b.open("/users", "#users")
	require.True(t, strings.Contains(b.text("#users"), "steward"))
	b.check("users")
	b.expectConsoleError("/memos/mem_missing") // the 404 itself is logged by the browser
	b.open("/memos/mem_missing", ".empty")
	require.Contains(t, b.text("main"), "Not found")
	b.check("not-found")
}

// TestBrowserSoleAdmin: the only steward is the admin who asked for the
// run: they see no enabled Approve, and why.
func TestBrowserSoleAdmin(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	b := newBrowser(t, bd.srv.URL)
	b.signIn("admin", "/workflows/draft-memo")
	b.do(chromedp.WaitVisible(chromedp.ID("brief")),
		chromedp.SendKeys(chromedp.ID("brief"), "Quarterly report on the river"),
		chromedp.Click(chromedp.CSS(`#run-now button.primary`)),
		chromedp.WaitVisible(chromedp.ID("transcript")))
	b.eventually(`document.querySelectorAll('#transcript .holdcard').length === 1`, "the run stops at its hold")
	b.open("/holds", "#open-holds-list article.hold")
	require.Equal(t, 1, b.count(`#open-holds-list button.approve[disabled]`), "no enabled Approve")
	require.Zero(t, b.count(`#open-holds-list button.approve:not([disabled])`))
	require.Contains(t, b.text("#open-holds-list .why"), "admin asked for this run and may not approve it")
	require.Contains(t, b.text("#open-holds-list .why"), "another steward must approve it")
	b.check("holds-sole-admin")
	b.open("/", "#decidable")
	require.Contains(t, b.text("#decidable"), "Nothing is waiting for your decision")
	b.check("home-sole-admin")
}

// TestBrowserStewardFlow drives the console as a steward and a viewer do,
// checking every page at both sizes on the way.
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
	failed := bd.failedRun(t, "Summarise the kingfisher thread")

	b := newBrowser(t, bd.srv.URL)
	b.signIn("steward", "/")
	b.do(chromedp.WaitVisible(chromedp.ID("decidable")))
	require.Contains(t, b.text("#decidable"), "Draft: Quarterly otter census")
	require.Contains(t, b.text("#failures"), "dispatch")
	b.check("home")

	b.step(t, "PhoneNav", func(t *testing.T) {
		// Phone: every nav item is on screen, none scrolled away.
		b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
		hidden, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('.nav a')].filter(a => {
		const r = a.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > window.innerWidth }).length`))
		require.NoError(t, err)
		require.Zero(t, hidden, "every nav item is reachable on a phone")
		b.do(chromedp.EmulateViewport(1280, 800))

	})

	b.step(t, "OriginToggles", func(t *testing.T) {
		// Origin toggles: workflow sessions appear and disappear.
		b.open("/sessions", "#sessions")
		require.Zero(t, b.count(`.session-row[data-origin="workflow"]`), "workflow sessions are hidden by default")
		require.Equal(t, 1, b.count(`.session-row[data-origin="channel"] .badge.slack`))
		b.check("sessions")
		b.do(chromedp.Click(chromedp.CSS(`a.toggle[data-origin="workflow"]`)))
		b.eventually(`document.querySelectorAll('.session-row[data-origin="workflow"]').length === 2`, "workflow sessions appear")
		require.Contains(t, b.text(`a.toggle[data-origin="workflow"]`), "workflow")
		require.Contains(t, b.location(), "origin=user%2Cchannel%2Cworkflow", "the choice is kept in the URL")
		b.check("sessions-with-workflow")
		b.do(chromedp.Click(chromedp.CSS(`a.toggle[data-origin="workflow"]`)))
		b.eventually(`document.querySelectorAll('.session-row[data-origin="workflow"]').length === 0 && document.querySelectorAll('.session-row').length === 2`,
			"workflow sessions disappear, the others stay")

	})

	b.step(t, "SlackSessionLive", func(t *testing.T) {
		// A Slack session: a message arrives live.
		b.do(chromedp.Click(chromedp.CSS(`a[href="/sessions/`+slack.ID+`"]`)), chromedp.WaitVisible(chromedp.ID("transcript")))
		require.Contains(t, b.text("#transcript"), "checklist")
		require.Contains(t, b.text("form.composer"), "posted into its Slack thread", "a message typed here goes to the thread")
		_, err = bd.sess.AppendEvent(ctx, slack.ID, store.EventUserMessage, "slack:U42", map[string]any{"text": "Can we add a rollback step?"})
		require.NoError(t, err)
		b.eventually(`document.getElementById('transcript').innerText.includes('Can we add a rollback step?')`, "the new message appears without a reload")
		b.check("session-slack")

	})

	b.step(t, "ConsoleSessionLive", func(t *testing.T) {
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
		b.check("session-user")

	})

	b.step(t, "WorkflowSession", func(t *testing.T) {
		// The workflow session shows the run and its hold card inline.
		b.open("/sessions/"+item.SessionID, "#transcript")
		require.Equal(t, 1, b.count(`.event[data-type="hold_opened"] .holdcard`))
		require.NotContains(t, b.text(`.event[data-type="hold_opened"] .holdcard`), "Decided by", "an open hold is decided by nobody yet")
		b.check("session-workflow")

	})

	b.step(t, "HoldsQueueLive", func(t *testing.T) {
		// Holds: a comment typed on one card survives a second hold arriving,
		// and the counts follow.
		b.open("/holds", "#open-holds-list")
		require.Equal(t, 1, b.count(`#open-holds-list article.hold`))
		require.Contains(t, b.text("#hold-"+hold.ID+" h3"), "Draft: Quarterly otter census", "cards lead with the hold's title")
		b.check("holds")
		b.do(chromedp.SendKeys(chromedp.ID("comment-"+hold.ID), "Numbers check out"))
		_, second := bd.heldRun(t, "slack:U9", "Heron nesting report")
		b.eventually(`document.querySelectorAll('#open-holds-list article.hold').length === 2`, "the second hold arrives")
		require.Equal(t, "Numbers check out", b.value("#comment-"+hold.ID), "the comment being typed is still there")
		b.eventually(`document.getElementById('open-count').innerText.trim() === '2'`, "the heading count says 2")
		b.eventually(`document.getElementById('nav-holds-count').innerText.trim().startsWith('2')`, "and the nav badge")
		// Decided elsewhere: the untouched card goes; the one being typed in stays.
		admin := engine.Decider{UserID: bd.users["admin"].ID, Via: "api"}
		_, err = bd.eng.Decide(ctx, engine.DecideParams{HoldID: second.ID, Decision: "reject", Comment: "duplicate", Decider: admin})
		require.NoError(t, err)
		b.eventually(`document.getElementById('open-count').innerText.trim() === '1' && !document.getElementById('hold-`+second.ID+`')`,
			"a hold decided elsewhere leaves the queue")
		_, err = bd.eng.Decide(ctx, engine.DecideParams{HoldID: hold.ID, Decision: "reject", Comment: "too early", Decider: admin})
		require.NoError(t, err)
		b.eventually(`document.getElementById('open-count').innerText.trim() === '0'`, "the count follows")
		require.Equal(t, 1, b.count("#hold-"+hold.ID), "the card being typed in is left alone")
		require.Equal(t, "Numbers check out", b.value("#comment-"+hold.ID))

	})

	b.step(t, "RefusedSubmission", func(t *testing.T) {
		// Submitting it now is refused (already decided): the answer is a page
		// that can be reloaded and shows what happened.
		b.do(chromedp.Click(chromedp.CSS(`#hold-`+hold.ID+` button[value="approve"]`)), chromedp.WaitVisible(chromedp.ID("attempt")))
		require.Contains(t, b.location(), "/holds/"+hold.ID+"?attempt=")
		require.Contains(t, b.text("#attempt"), "Your approval was not recorded")
		require.Contains(t, b.text("#attempt"), "already rejected by admin")
		b.check("hold-refused")
		b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("attempt")))
		require.Contains(t, b.text("#attempt"), "Your approval was not recorded", "the page reloads with its message")
		require.NotContains(t, b.text("main"), "Method not allowed")

	})

	b.step(t, "EditedApproval", func(t *testing.T) {
		// An edited approval: the hold page shows the diff and the edit's guards.
		_, third := bd.heldRun(t, "slack:U9", "Kingfisher survey")
		b.open("/holds/"+third.ID, "#hold-"+third.ID)
		b.check("hold")
		b.do(
			chromedp.Click(chromedp.CSS(`#hold-`+third.ID+` details.edit summary`)),
			chromedp.WaitVisible(chromedp.ID("output-"+third.ID)),
			chromedp.SetValue(chromedp.ID("output-"+third.ID), "# Kingfishers by the weir\n\nSeven pairs this spring."),
			chromedp.SendKeys(chromedp.ID("comment-"+third.ID), "Tightened"),
			chromedp.Click(chromedp.CSS(`#hold-`+third.ID+` button[value="approve"]`)),
			chromedp.WaitVisible(chromedp.ID("run-status")),
		)
		b.eventually(`document.getElementById('run-status').innerText.trim() === 'succeeded'`, "the run page shows the run finish")
		require.Contains(t, b.text("#dispatch"), "Kingfishers by the weir")
		require.Contains(t, b.text("#run-lead"), "approved by steward with edits")
		b.check("run")
		b.open("/holds/"+third.ID, "#diff")
		dels, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#diff del')].map(e => e.innerText)`))
		require.NoError(t, err)
		ins, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#diff ins')].map(e => e.innerText)`))
		require.NoError(t, err)
		require.Contains(t, strings.Join(dels, "\n"), "# Draft: Kingfisher survey", "the run's lines are shown removed")
		require.Contains(t, strings.Join(ins, "\n"), "# Kingfishers by the weir", "the published lines added")
		require.Contains(t, strings.Join(ins, "\n"), "Seven pairs this spring.")
		require.Contains(t, b.text("#edited-guards"), "min_chars")
		b.check("hold-edited")

	})

	b.step(t, "Rerun", func(t *testing.T) {
		// Re-run a failed run: a new item, and the browser lands on its run.
		b.open("/runs/"+failed.ID, "#run-lead")
		require.Contains(t, b.text("#run-lead"), "Failed before its first step")
		b.check("run-failed")
		b.do(chromedp.Click(chromedp.CSS(`form[action="/runs/` + failed.ID + `/rerun"] button`)))
		b.eventually(`location.pathname.startsWith('/runs/') && !location.pathname.endsWith('`+failed.ID+`') && !!document.getElementById('run-live')`,
			"the browser lands on the new run")
		require.Contains(t, b.text("main"), "Re-run of "+failed.ID+" queued")
		rerunRun := strings.TrimPrefix(b.location(), bd.srv.URL+"/runs/")
		it, err := bd.db.QueueItemGetByID(ctx, store.ItemIDForRun(rerunRun))
		require.NoError(t, err, "Re-run made a new item")
		require.Equal(t, "rerun:"+failed.ID+":1", it.DedupeKey)
		b.eventually(`document.getElementById('run-status').innerText.trim() === 'failed'`, "the re-run runs (and fails the same way)")

	})

	b.step(t, "Pages", func(t *testing.T) {
		b.open("/edges", "#edges")
		b.check("edges")
		b.open("/runs", "#runs")
		b.check("runs")
		b.do(chromedp.SendKeys(chromedp.ID("rq"), "kingfisher"), chromedp.Submit(chromedp.ID("rq")))
		b.eventually(`location.search.includes('q=kingfisher') && document.querySelectorAll('#runs .row.runs:not(.head)').length === 3`,
			"the text filter keeps the kingfisher runs")
		b.check("runs-filtered")
		b.open("/memos", "#memos")
		b.do(chromedp.Click(chromedp.CSS(`#memos a.title`)), chromedp.WaitVisible(chromedp.ID("memo-body")))
		b.check("memo-published")

	})

	b.step(t, "Viewer", func(t *testing.T) {
		// A viewer sees no decision controls, and why.
		_, fourth := bd.heldRun(t, "slack:U9", "Otter holts")
		b.signOut()
		b.signIn("viewer", "/holds/"+fourth.ID)
		b.do(chromedp.WaitVisible(chromedp.ID("hold-" + fourth.ID)))
		require.Zero(t, b.count(`button[name="decision"]`), "a viewer never sees decide buttons")
		require.Zero(t, b.count(`form.decide`))
		require.Contains(t, b.text("#hold-"+fourth.ID+" .why"), "viewer is not a steward")
		b.check("hold-viewer")
		landed, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`fetch('/holds/`+fourth.ID+`/decision', {method: 'POST',
		headers: {'Content-Type': 'application/x-www-form-urlencoded'},
		body: 'decision=approve&csrf_token=' + encodeURIComponent(document.querySelector('meta[name="csrf-token"]').content)}).then(r => r.url)`,
			chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		require.Contains(t, landed, "/holds/"+fourth.ID+"?attempt=", "the refused attempt lands on the hold page")
		h, err := bd.db.HoldGetByID(ctx, fourth.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, h.Status, "the viewer's attempt changed nothing")
		b.open("/", "#decidable")
		b.check("home-viewer")
	})
}

// TestBrowserLongWords: titles, briefs and searches made of one unbroken
// word (a URL, a pasted hash, a name with no spaces) wrap on a phone; no
// page grows wider than the window.
func TestBrowserLongWords(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	word := strings.Repeat("Longword", 40) // 320 characters, no break
	item, hold := bd.heldRun(t, "slack:U9", word)
	ses := bd.session(t, strings.Repeat("Sessiontitle", 41), "", sessions.ViaConsole) // 492
	runs, err := bd.db.RunList(context.Background(), &store.RunListParams{SessionID: item.SessionID})
	require.NoError(t, err)
	require.Len(t, runs, 1)

	b := newBrowser(t, bd.srv.URL)
	b.signIn("steward", "/")
	for _, p := range []struct{ name, path, wait string }{
		{"long-home", "/", "#decidable"},
		{"long-holds", "/holds", "#open-holds-list"},
		{"long-hold", "/holds/" + hold.ID, "#hold-" + hold.ID},
		{"long-run", "/runs/" + runs[0].ID, "#run-lead"},
		{"long-runs", "/runs", "main"},
		{"long-sessions", "/sessions", "#sessions"},
		{"long-session", "/sessions/" + ses.ID, "#transcript"},
		{"long-workflow-session", "/sessions/" + item.SessionID, "#transcript"},
		{"long-memo-search", "/memos?q=" + word, "main"},
	} {
		b.open(p.path, p.wait)
		b.check(p.name)
	}
}
