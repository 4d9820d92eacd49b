package web_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// failedRun enqueues /summarize-thread, which replies into a conversation:
// enqueued in none, it fails at once with error kind dispatch.
func (b *bundle) failedRun(t testing.TB, brief string) *store.Run {
	t.Helper()
	item, _, err := b.eng.Enqueue(context.Background(), engine.EnqueueParams{Command: "/summarize-thread", DedupeKey: brief,
		Payload: map[string]any{"brief": brief}, OwnerUID: "slack:U7"})
	require.NoError(t, err)
	var run *store.Run
	require.Eventually(t, func() bool {
		r, err := b.db.RunGetByID(context.Background(), store.RunIDForItem(item.ID))
		if err == nil && r.Settled() {
			run = r
		}
		return run != nil
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, store.RunFailed, run.Status)
	return run
}

func TestHome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, theirs := b.heldRun(t, "slack:U9", "Otters at dawn")
	_, mine := b.heldRun(t, "user:"+b.users["admin"].ID, "My own brief")
	failed := b.failedRun(t, "Summarise the thread")

	admin := b.signedIn(t, "admin")
	status, page := admin.get("/")
	require.Equal(t, http.StatusOK, status)
	decidable := page[strings.Index(page, `id="decidable"`):strings.Index(page, `id="failures"`)]
	require.Contains(t, decidable, `href="/holds/`+theirs.ID+`">Draft: Otters at dawn</a>`, "a hold the admin may decide, led by its title")
	require.Contains(t, decidable, "waiting ", "with its age")
	require.NotContains(t, decidable, mine.ID, "a hold the admin asked for is not theirs to decide")
	require.Contains(t, page, `<span class="tile-n" id="home-open-holds">2</span>`)
	require.Regexp(t, `data-status="suspended"><span class="tile-n">2</span>\s*<span class="tile-label">suspended \(24 h\)</span>`, page)
	require.Regexp(t, `data-status="failed"><span class="tile-n">1</span>`, page)
	failures := page[strings.Index(page, `id="failures"`):]
	require.Contains(t, failures, `href="/runs/`+failed.ID+`"`)
	require.Contains(t, failures, `<span class="status failed">dispatch</span>`, "a failure shows its error kind")
	require.Regexp(t, `<svg class="chart-svg" viewBox="0 0 720 210" role="img" aria-labelledby="chart-title"`, page, "the chart is inline SVG")
	require.Regexp(t, `<rect class="bar suspended" x="\d+" y="\d+" width="\d+" height="\d+"><title>\d\d:00 UTC: 2 suspended</title>`, page)
	require.NotRegexp(t, `<script>|<script [^s]`, page, "no chart script")

	viewer := b.signedIn(t, "viewer")
	_, page = viewer.get("/")
	require.Contains(t, page, "You are signed in as a viewer")
	require.NotContains(t, page, `href="/holds/`+theirs.ID+`"`)
}

func TestRunsPageFiltersRerunAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	item, hold := b.heldRun(t, "slack:U9", "Otter census")
	_, heron := b.heldRun(t, "slack:U9", "Heron nests")
	failed := b.failedRun(t, "A thread about kingfishers")
	viewer := b.signedIn(t, "viewer")
	steward := b.signedIn(t, "steward")

	for _, tc := range []struct {
		query       string
		want, never []string
	}{
		{"", []string{"Draft: Otter census", "Draft: Heron nests", "A thread about kingfishers"}, nil},
		{"workflow=draft-memo", []string{"Draft: Otter census", "Draft: Heron nests"}, []string{"kingfishers"}},
		{"q=otter", []string{"Draft: Otter census"}, []string{"Heron", "kingfishers"}},
		{"q=KINGFISH&status=failed", []string{"A thread about kingfishers"}, []string{"Otter"}},
		{"sessionId=" + item.SessionID, []string{"Draft: Otter census"}, []string{"Heron"}},
		{"status=succeeded", nil, []string{"Otter", "Heron", "kingfishers"}},
	} {
		status, page := viewer.get("/runs?" + tc.query)
		require.Equal(t, http.StatusOK, status, tc.query)
		rows := page
		if i := strings.Index(page, `id="runs"`); i >= 0 {
			rows = page[i:]
		} else {
			rows = ""
		}
		for _, w := range tc.want {
			require.Contains(t, rows, w, tc.query)
		}
		for _, n := range tc.never {
			require.NotContains(t, rows, n, tc.query)
		}
	}
	_, page := viewer.get("/runs?workflow=draft-memo")
	require.Regexp(t, `data-status="suspended">suspended\s*<span class="n"> 2</span>`, page, "per-status counts under the filter")
	require.Regexp(t, `data-status="failed">failed\s*<span class="n"> 0</span>`, page)
	require.Contains(t, page, `<option value="draft-memo" selected>/draft-memo</option>`)
	_, page = viewer.get("/runs/" + failed.ID)
	require.Contains(t, page, `Failed before its first step — dispatch`, "a failed run says where and why")
	require.NotContains(t, page, `action="/runs/`+failed.ID+`/rerun"`, "a viewer gets no Re-run")
	lead := page[:strings.Index(page, `id="steps-heading"`)]
	require.NotContains(t, lead, failed.RunnerID, "no raw runner id in the lead")

	// Re-run: a new item with the same payload, the browser sent to its run.
	status, page, landed := steward.postFollow("/runs/"+failed.ID+"/rerun", nil)
	require.Equal(t, http.StatusOK, status)
	require.NotEqual(t, "/runs/"+failed.ID, landed)
	rerun, err := b.db.QueueItemGetByID(ctx, store.ItemIDForRun(strings.TrimPrefix(landed, "/runs/")))
	require.NoError(t, err)
	require.Equal(t, "rerun:"+failed.ID+":1", rerun.DedupeKey)
	require.Equal(t, map[string]any{"brief": "A thread about kingfishers", "title": "A thread about kingfishers"}, rerun.Payload, "the original's payload, as the engine titled it")
	require.Contains(t, page, "Re-run of "+failed.ID+" queued")
	waitRun(t, b, store.RunIDForItem(rerun.ID), store.RunFailed)
	status, _, _ = viewer.postFollow("/runs/"+failed.ID+"/rerun", nil)
	require.Equal(t, http.StatusOK, status)
	n, err := b.db.RunCountsByStatus(ctx, &store.RunCountParams{Command: "/summarize-thread"})
	require.NoError(t, err)
	require.Equal(t, int64(2), n.ByStatus[store.RunFailed], "the viewer's re-run was refused")

	// Cancel a held run: a rejection in the steward's name.
	_, page = steward.get("/runs/" + heron.RunID)
	require.Contains(t, page, `action="/runs/`+heron.RunID+`/cancel"`)
	require.Contains(t, page, "Waiting for a steward&#39;s approval for")
	status, page, _ = steward.postFollow("/runs/"+heron.RunID+"/cancel", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Rejected by steward: cancelled. Nothing was published.")
	h, err := b.db.HoldGetByID(ctx, heron.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldRejected, h.Status)
	_, page = steward.get("/runs/" + hold.RunID)
	require.Regexp(t, `<li class="wf-row wait open" data-kind="wait">`, page, "the approval wait is its own segment")
}

func TestMemoProvenanceAndEditing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, hold := b.heldRun(t, "slack:U9", "Beaver dams")
	steward := b.signedIn(t, "steward")
	admin := b.signedIn(t, "admin")
	viewer := b.signedIn(t, "viewer")
	status, _, _ := steward.post("/holds/"+hold.ID+"/decision", url.Values{"decision": {"approve"}, "comment": {"fine"}})
	require.Equal(t, http.StatusSeeOther, status)
	run := waitRun(t, b, hold.RunID, store.RunSucceeded)
	memoPath := "/memos/" + run.DispatchMemoID

	_, page := viewer.get(memoPath)
	prov := page[strings.Index(page, `id="provenance"`):]
	require.Contains(t, prov, `href="/runs/`+run.ID+`">Draft: Beaver dams</a>`, "the run that published it")
	require.Contains(t, prov, `href="/holds/`+hold.ID+`"`, "its hold")
	require.Contains(t, prov, "<strong>steward</strong> via console", "and the steward who approved it")
	require.NotContains(t, page, memoPath+"/edit", "a viewer cannot edit")
	status, _ = viewer.get(memoPath + "/edit")
	require.Equal(t, http.StatusForbidden, status)

	// Two stewards edit from version 1; the second save loses the race.
	_, form := steward.get(memoPath + "/edit")
	require.Contains(t, form, `name="expected_version" value="1"`)
	edit := func(c *client, body string) (int, string, string) {
		return c.postFollow(memoPath+"/edit", url.Values{"expected_version": {"1"}, "title": {"Beaver dams"}, "body": {body}})
	}
	status, page, landed := edit(admin, "# Beaver dams\n\nThe admin's version.")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, memoPath, landed)
	require.Contains(t, page, "Saved: version 2.")
	status, page, landed = edit(steward, "# Beaver dams\n\nThe steward's version.")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, landed, "/edit?draft=", "a conflict lands on a page of its own")
	require.Contains(t, page, "you started from version 1; it is now at version 2")
	require.Contains(t, page, "The admin&#39;s version.", "the version that won is shown")
	require.Contains(t, page, "># Beaver dams\n\nThe steward&#39;s version.</textarea>", "and the loser's text is kept in the form")
	require.Contains(t, page, `name="expected_version" value="2"`)
	status, again := steward.get(landed)
	require.Equal(t, http.StatusOK, status, "the conflict page can be reloaded")
	require.Contains(t, again, "The steward&#39;s version.")
	_, other := admin.get(landed)
	require.NotContains(t, other, "The steward&#39;s version.", "a draft belongs to the sign-in that wrote it")
	m, err := b.db.MemoGetByID(ctx, run.DispatchMemoID)
	require.NoError(t, err)
	require.Contains(t, m.Body, "The admin's version.", "nothing was clobbered")

	// A refused save answers with the form as sent: nothing typed is lost.
	for _, tc := range []struct {
		name, title, body, reason string
		status                    int
	}{
		{"BlankTitle", " ", "# \n\nA body worth keeping.", "title", http.StatusBadRequest},
		{"BodyOver1MiB", "Beaver dams", strings.Repeat("dam ", 300_000) + "worth keeping.", "1048576 bytes", http.StatusRequestEntityTooLarge},
	} {
		status, page, _ := steward.post(memoPath+"/edit", url.Values{"expected_version": {"2"}, "title": {tc.title}, "body": {tc.body}, "notes": {"my notes"}})
		require.Equal(t, tc.status, status, tc.name)
		require.Contains(t, page, `id="me-error"`, tc.name)
		require.Contains(t, page, tc.reason, tc.name)
		require.Contains(t, page, "worth keeping.</textarea>", "%s: the body is kept", tc.name)
		require.Contains(t, page, `value="my notes"`, "%s: and the notes", tc.name)
		require.Contains(t, page, `name="expected_version" value="2"`, tc.name)
	}
	m, err = b.db.MemoGetByID(ctx, run.DispatchMemoID)
	require.NoError(t, err)
	require.Equal(t, int64(2), m.ContentVersion, "nothing was saved")

	// Paging: 60 memos make a second page.
	for i := range 60 {
		_, err := b.lib.Create(ctx, libraryMemo(i))
		require.NoError(t, err)
	}
	_, page = viewer.get("/memos?q=heron")
	require.Contains(t, page, `rel="next"`)
	next := regexp.MustCompile(`href="(/memos\?[^"]+)" rel="next"`).FindStringSubmatch(page)
	require.NotNil(t, next)
	_, second := viewer.get(html.UnescapeString(next[1]))
	require.Contains(t, second, "Page 2")
	require.Contains(t, second, `rel="prev"`)

	// A filter the grammar refuses is a 400 that keeps the search page: the
	// query stays in the box, the reason beside it.
	for _, q := range []string{"limit:100 heron", "since:xx", "tag:"} {
		status, page := viewer.get("/memos?q=" + url.QueryEscape(q))
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Contains(t, page, `value="`+html.EscapeString(q)+`"`, "the query is kept: %s", q)
		require.Contains(t, page, `id="search-error"`, q)
		require.Contains(t, page, `aria-invalid="true"`, q)
	}
}

func TestUsersDisableAndReset(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.signedIn(t, "admin")
	steward := b.signedIn(t, "steward")
	id := b.users["steward"].ID

	status, page, _ := admin.postFollow("/users/"+id+"/disabled", url.Values{"disabled": {"true"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "steward is disabled")
	status, _ = steward.get("/holds")
	require.Equal(t, http.StatusSeeOther, status, "a disabled user's cookie no longer signs them in")
	c := b.client(t)
	status, _ = c.signIn("steward", testPassword)
	require.Equal(t, http.StatusForbidden, status, "nor can they sign in again")
	_, page, _ = c.do(http.MethodGet, "/login", nil, nil)
	status, _ = admin.get("/users")
	require.Equal(t, http.StatusOK, status)
	status, page, _ = admin.postFollow("/users/"+b.users["admin"].ID+"/disabled", url.Values{"disabled": {"true"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "cannot disable yourself")

	status, _, _ = admin.postFollow("/users/"+id+"/disabled", url.Values{"disabled": {"false"}})
	require.Equal(t, http.StatusOK, status)
	again := b.signedIn(t, "steward")
	status, page, _ = admin.postFollow("/users/"+id+"/password", url.Values{"password": {"a fresh password"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "password of steward is reset")
	status, _ = again.get("/holds")
	require.Equal(t, http.StatusSeeOther, status, "a reset ends the user's sign-ins")
	fresh := b.client(t)
	status, _ = fresh.signIn("steward", "a fresh password")
	require.Equal(t, http.StatusSeeOther, status, "the new password signs in")
	status, page, _ = admin.postFollow("/users/"+id+"/password", url.Values{"password": {"short"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "at least 8 characters")
}

func TestSlackPermalinks(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fakeSlack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		if r.URL.Path != "/chat.getPermalink" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"channel":"` + r.Form.Get("channel") + `","permalink":"https://example.slack.com/archives/` +
			r.Form.Get("channel") + `/p` + strings.ReplaceAll(r.Form.Get("message_ts"), ".", "") + `"}`))
	}))
	t.Cleanup(fakeSlack.Close)
	api := slack.New("xoxb-test", slack.OptionAPIURL(fakeSlack.URL+"/"))
	b := setupWith(t, func(d *web.Deps) { d.Slack = bridge.Permalinks{API: api} })
	s := b.session(t, "Launch thread", "slack:C042:1700000000.000100", sessions.ViaSlack)
	c := b.signedIn(t, "viewer")
	want := `href="https://example.slack.com/archives/C042/p1700000000000100"`
	_, page := c.get("/sessions/" + s.ID)
	require.Contains(t, page, want, "the session links its Slack thread")
	_, page = c.get("/sessions/" + s.ID)
	require.Contains(t, page, want)
	require.Equal(t, int32(1), calls.Load(), "the permalink is cached")

	item, _, err := b.eng.Enqueue(context.Background(), engine.EnqueueParams{Command: "/draft-memo", DedupeKey: "thread",
		Payload: map[string]any{"brief": "From the thread"}, SessionID: s.ID, OwnerUID: "slack:U1"})
	require.NoError(t, err)
	holdID := store.HoldIDForRun(store.RunIDForItem(item.ID))
	require.Eventually(t, func() bool {
		_, err := b.db.HoldGetByID(context.Background(), holdID)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
	_, page = c.get("/holds/" + holdID)
	require.Contains(t, page, want, "the hold links the thread it came from")
	require.Equal(t, int32(1), calls.Load(), "from the cache")

	console := b.session(t, "Console chat", "", sessions.ViaConsole)
	_, page = c.get("/sessions/" + console.ID)
	require.NotContains(t, page, "Slack thread", "a console session has none")
}

func libraryMemo(i int) library.CreateParams {
	return library.CreateParams{Title: fmt.Sprintf("Heron note %02d", i), Body: "Herons wade at dusk."}
}

// An edit that breaks a workflow is saved (the memo is text first), and the
// admin is told at once that the workflow no longer compiles, and where.
func TestMemoEditBreaksWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admin := b.signedIn(t, "admin")
	wf, err := b.db.WorkflowGetByCommand(ctx, "/draft-memo")
	require.NoError(t, err)
	m, err := b.db.MemoGetByID(ctx, wf.MemoID)
	require.NoError(t, err)
	broken := strings.Replace(m.Body, "- **Destination**", "- **Priority** high\n- **Destination**", 1)
	require.NotEqual(t, m.Body, broken)
	line := strings.Count(broken[:strings.Index(broken, "- **Priority**")], "\n") + 1

	status, page, landed := admin.postFollow("/memos/"+m.ID+"/edit", url.Values{"expected_version": {strconv.FormatInt(m.ContentVersion, 10)},
		"title": {m.Title}, "body": {broken}})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/workflows/draft-memo", landed, "the workflow's page, where the errors are marked")
	require.Contains(t, page, "Saved: version 2, but /draft-memo does not compile")
	require.Contains(t, page, fmt.Sprintf("line %d", line))
	require.Contains(t, page, "unknown field &#34;Priority&#34;")

	_, page = admin.get("/memos/" + m.ID)
	require.Contains(t, page, "It does not compile: 1 error (line", "the memo's page says so too")
}

// Renaming a memo that workflows name (a Gate, a Hook) breaks them; the
// save says which, at once, instead of a plain "Saved".
func TestMemoRenameBreaksWorkflows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")
	m, err := b.db.MemoGetByTitle(ctx, "Style guide")
	require.NoError(t, err)
	status, page, landed := steward.postFollow("/memos/"+m.ID+"/edit", url.Values{"expected_version": {strconv.FormatInt(m.ContentVersion, 10)},
		"title": {"House style"}, "body": {m.Body}})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/memos/"+m.ID, landed)
	require.Contains(t, page, "Saved: version 2, but /draft-memo and /weekly-digest no longer compile", "both name it as their Gate")
	require.Contains(t, page, `class="flash error"`)
}

// The library lists each memo with an excerpt of its text, its markup gone.
func TestMemoListExcerpts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, page := b.signedIn(t, "viewer").get("/memos?type=workflow")
	require.Contains(t, page, "Command /draft-memo", "the seeded workflow's Trigger, as text")
	require.NotContains(t, page, "Command**")
	require.NotContains(t, page, "`/draft-memo`")
}

// TestTwoApprovalsNameBothStewards: a run and a memo published through a
// hold that needed two approvals name both stewards, and the edit its
// author, who need not be the last to approve.
func TestTwoApprovalsNameBothStewards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	src, err := b.db.MemoSearch(ctx, &store.MemoSearchParams{Query: "Draft memo from brief", MemoType: store.MemoTypeWorkflow, IncludeUnlisted: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, src, 1)
	doc := strings.Replace(strings.Replace(strings.Replace(src[0].Body, "`/draft-memo`", "`/pair-draft`", 1),
		"- **Approval** `hold`", "- **Approval** `hold`\n- **Approvals** `2`", 1), "# Draft memo from brief", "# Pair draft", 1)
	_, _, err = b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	_, hold := b.heldRunOf(t, "/pair-draft", "slack:U9", "Weirs")
	decider := func(name string) engine.Decider {
		u := b.users[name]
		return engine.Decider{UserID: u.ID, Username: u.Username, Role: u.Role, Via: "console"}
	}
	_, err = b.eng.Decide(ctx, engine.DecideParams{HoldID: hold.ID, Decision: "approve", Output: "# Weirs\n\nWeirs, edited.", Decider: decider("steward")})
	require.NoError(t, err)
	_, err = b.eng.Decide(ctx, engine.DecideParams{HoldID: hold.ID, Decision: "approve", Decider: decider("admin")})
	require.NoError(t, err)
	run := waitRun(t, b, hold.RunID, store.RunSucceeded)

	viewer := b.signedIn(t, "viewer")
	_, page := viewer.get("/runs/" + run.ID)
	require.Contains(t, page, "approved by steward and admin with edits by steward")
	_, page = viewer.get("/memos/" + run.DispatchMemoID)
	prov := page[strings.Index(page, `id="provenance"`):]
	require.Contains(t, prov, "<strong>steward and admin</strong> via console")
	require.Contains(t, prov, "steward edited the output before publishing")
}
