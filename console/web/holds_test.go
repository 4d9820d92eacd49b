package web_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// waitRun waits for the run to reach status. A run not claimed yet (a
// fresh re-run) is waited for too. (The condition runs on testify's polling
// goroutine, so it reports instead of calling require.)
func waitRun(t *testing.T, b *bundle, runID, status string) *store.Run {
	t.Helper()
	var run *store.Run
	require.Eventually(t, func() bool {
		r, err := b.db.RunGetByID(context.Background(), runID)
		if err != nil {
			return false
		}
		run = r
		return r.Status == status
	}, 20*time.Second, 20*time.Millisecond, "run %s reaches %s", runID, status)
	return run
}

func TestHoldDecisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")
	viewer := b.signedIn(t, "viewer")

	_, hold := b.heldRun(t, "slack:U9", "otters in winter")

	t.Run("ViewerSeesNoButtonsAndIsRefused", func(t *testing.T) {
		_, page := viewer.get("/holds")
		require.Contains(t, page, hold.ID)
		require.NotContains(t, page, `name="decision"`)
		require.Contains(t, page, "viewer is not a steward", "the viewer is told why there is nothing to press")
		_, page = viewer.get("/holds/" + hold.ID)
		require.NotContains(t, page, `name="decision"`)
		status, page, landed := viewer.postFollow("/holds/"+hold.ID+"/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusOK, status, "a refused decision lands on a page (post/redirect/get)")
		require.Contains(t, landed, "/holds/"+hold.ID+"?attempt=")
		require.Contains(t, page, "Your approval was refused: viewer is not a steward")
		again, reloaded := viewer.get(landed)
		require.Equal(t, http.StatusOK, again, "the page can be reloaded")
		require.Contains(t, reloaded, "Your approval was refused", "and still says what happened")
		_, shared := steward.get(landed)
		require.Contains(t, shared, "viewer&#39;s approval was refused", "a shared link names whose attempt it was")
		h, err := b.db.HoldGetByID(ctx, hold.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, h.Status)
		ds, err := b.db.HoldDecisionList(ctx, hold.ID)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, store.AttemptRefused, ds[0].Outcome, "the refused attempt is audited")
	})

	t.Run("CrossSiteDecisionRefused", func(t *testing.T) {
		status, _, _ := steward.do(http.MethodPost, "/holds/"+hold.ID+"/decision",
			url.Values{"csrf_token": {steward.csrf}, "decision": {"approve"}}, map[string]string{"Origin": "https://evil.example"})
		require.Equal(t, http.StatusForbidden, status)
		h, err := b.db.HoldGetByID(ctx, hold.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, h.Status)
	})

	t.Run("StewardApprovesWithComment", func(t *testing.T) {
		_, page := steward.get("/holds")
		require.Contains(t, page, `name="decision" value="approve"`)
		require.Contains(t, page, "Slack user U9", "the requester is shown")
		status, _, resp := steward.post("/holds/"+hold.ID+"/decision", url.Values{"decision": {"approve"}, "comment": {"ship it"}})
		require.Equal(t, http.StatusSeeOther, status)
		require.Equal(t, "/runs/"+hold.RunID, resp.Header.Get("Location"))
		run := waitRun(t, b, hold.RunID, store.RunSucceeded)
		require.NotEmpty(t, run.DispatchMemoID)

		_, page = steward.get("/runs/" + hold.RunID)
		require.Contains(t, page, `href="/memos/`+run.DispatchMemoID+`"`, "the run page links what it dispatched")
		require.Contains(t, page, "Guard outcomes")
		require.Contains(t, page, "ship it")
		require.NotContains(t, page, `hx-get="/runs/`, "a settled run stops polling")

		_, page = steward.get("/holds/" + hold.ID)
		require.Contains(t, page, "approved")
		require.Contains(t, page, "via console")
		require.Contains(t, page, `id="audit"`)

		_, page = steward.get("/holds")
		require.Contains(t, page, `id="decided-holds"`)
		require.Contains(t, page, "ship it")

		status, page, _ = steward.postFollow("/holds/"+hold.ID+"/decision", url.Values{"decision": {"reject"}})
		require.Equal(t, http.StatusOK, status)
		require.Regexp(t, `Your rejection was not recorded: this hold was already approved by steward via console on \d{1,2} [A-Z][a-z]{2} \d{4} at \d\d:\d\d UTC`,
			page, "the conflict names who decided and when, as people read it")
	})

	t.Run("ApproveEditedOutput", func(t *testing.T) {
		_, h := b.heldRun(t, "slack:U9", "edit me")
		tooLong := strings.Repeat("otters ", 3000) + "the end"
		status, page, landed := steward.postFollow("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}, "output": {tooLong}, "comment": {"trimmed it"}})
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, "Your approval was refused: the edited output fails the Guard check max_chars", "a failing edit is refused naming the check")
		require.Contains(t, page, ">"+tooLong+"</textarea>", "the refused edit is back in the box, to shorten")
		require.Contains(t, page, `<details class="edit" open>`, "opened")
		require.Contains(t, page, `value="trimmed it"`, "and the comment")
		require.Contains(t, landed, "?attempt=")
		_, other := b.signedIn(t, "admin").get(strings.TrimPrefix(landed, b.srv.URL))
		require.NotContains(t, other, tooLong, "another steward following the link sees the run's own output to edit")
		edited := "# Edited title\r\n\r\nA steward rewrote this."
		status, _, _ = steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}, "output": {edited}})
		require.Equal(t, http.StatusSeeOther, status)
		run := waitRun(t, b, h.RunID, store.RunSucceeded)
		m, err := b.db.MemoGetByID(ctx, run.DispatchMemoID)
		require.NoError(t, err)
		require.Equal(t, "# Edited title\n\nA steward rewrote this.", m.Body, "the edited text is what is dispatched")
		require.Equal(t, "Edited title", m.Title)

		_, page = steward.get("/holds/" + h.ID)
		require.Contains(t, page, `id="diff"`)
		require.Regexp(t, `<del class="dl"><span class="sr-only">removed: </span># Draft: edit me</del>`, page, "the run's heading is shown removed")
		require.Regexp(t, `<ins class="dl"><span class="sr-only">added: </span># Edited title</ins>`, page, "the steward's heading is shown added")
		require.Regexp(t, `<ins class="dl"><span class="sr-only">added: </span>A steward rewrote this.</ins>`, page)
		require.Contains(t, page, `id="edited-guards"`, "the edited text's guard results are shown")
		require.Contains(t, page, "min_chars")
		require.Contains(t, page, "approved with an edited output", "approved, not necessarily published: a later hold may still stop the run")
	})

	t.Run("RejectWithReason", func(t *testing.T) {
		_, h := b.heldRun(t, "slack:U9", "reject me")
		status, _, _ := steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"reject"}, "comment": {"ignored"}, "reason": {"off topic"}})
		require.Equal(t, http.StatusSeeOther, status)
		waitRun(t, b, h.RunID, store.RunCancelled)
		got, err := b.db.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, "off topic", got.Comment, "a rejection's reason is its comment")
		_, page := steward.get("/runs/" + h.RunID)
		require.Contains(t, page, "Rejected by steward: off topic. Nothing was published.", "the run says who rejected it and why")
		require.NotContains(t, page, "nothing yet")
		require.NotContains(t, page, `<span class="status held">`, "no step waits any more")
		status, page, _ = steward.postFollow("/holds/"+h.ID+"/decision", url.Values{"decision": {"maybe"}})
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, `decision must be &#34;approve&#34; or &#34;reject&#34;, got &#34;maybe&#34;`)
		status, _, _ = steward.post("/holds/hld_missing/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusNotFound, status)
	})

	t.Run("NoSelfApproval", func(t *testing.T) {
		_, h := b.heldRun(t, "user:"+b.users["steward"].ID, "my own")
		_, page := steward.get("/holds/" + h.ID)
		require.Contains(t, page, "steward asked for this run and may not approve it")
		require.Contains(t, page, `<button class="approve" type="button" disabled aria-describedby="why-`+h.ID+`">Approve</button>`,
			"no enabled Approve")
		require.Contains(t, page, `value="reject"`, "the requester may still reject")
		status, page, _ := steward.postFollow("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, "may not approve it")
		admin := b.signedIn(t, "admin")
		status, _, _ = admin.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusSeeOther, status)
	})

	t.Run("RunsAndStatusFilter", func(t *testing.T) {
		_, page := viewer.get("/runs?status=succeeded")
		require.Contains(t, page, hold.RunID)
		_, page = viewer.get("/runs?status=cancelled")
		require.NotContains(t, page, hold.RunID)
		status, _ := viewer.get("/runs?status=bogus")
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = viewer.get("/runs?cursor=bogus")
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = viewer.get("/holds?before=bogus")
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = viewer.get("/runs/run_missing")
		require.Equal(t, http.StatusNotFound, status)
		status, _ = viewer.get("/holds/hld_missing")
		require.Equal(t, http.StatusNotFound, status)
	})
}

// TestHoldsLiveRefresh: the queue's poll answers out-of-band swaps only:
// a new hold is appended, a decided one removed, a changed one replaced,
// the counts set; cards the page already shows unchanged are not re-sent.
func TestHoldsLiveRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := b.signedIn(t, "steward")
	_, page := c.get("/holds")
	require.Contains(t, page, "Nothing is waiting")
	require.Contains(t, page, `hx-get="/holds/live?"`)
	status, frag := c.get("/holds/live")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, frag, `<span id="open-count" hx-swap-oob="true" aria-live="polite">0</span>`)
	require.NotContains(t, frag, "<html", "a fragment, not a page")

	_, first := b.heldRun(t, "slack:U1", "first")
	_, frag = c.get("/holds/live")
	require.Contains(t, frag, `hx-swap-oob="beforeend:#open-holds-list"`)
	require.Contains(t, frag, `id="hold-`+first.ID+`"`, "an arrival is appended")
	require.Contains(t, frag, `>1</span>`)

	_, frag = c.get("/holds/live?shown=" + first.ID + ":0")
	require.NotContains(t, frag, `id="hold-`+first.ID+`"`, "a card shown unchanged is not re-sent")
	_, second := b.heldRun(t, "slack:U1", "second")
	_, frag = c.get("/holds/live?shown=" + first.ID + ":0")
	require.Contains(t, frag, `id="hold-`+second.ID+`"`)
	require.NotContains(t, frag, `id="hold-`+first.ID+`"`)
	require.Contains(t, frag, `<span id="open-count" hx-swap-oob="true" aria-live="polite">2</span>`, "the count follows")
	require.Contains(t, frag, `id="nav-holds-count"`, "and the nav badge")

	_, err := b.eng.Decide(ctx, engine.DecideParams{HoldID: first.ID, Decision: "reject", Decider: engine.Decider{UserID: b.users["admin"].ID, Via: "api"}})
	require.NoError(t, err)
	_, frag = c.get("/holds/live?shown=" + first.ID + ":0&shown=" + second.ID + ":7")
	require.Contains(t, frag, `<div id="hold-`+first.ID+`" hx-swap-oob="delete">`, "a decided hold is removed")
	require.Regexp(t, `<article class="panel hold" id="hold-`+second.ID+`"[^>]*hx-swap-oob="true"`, frag, "a changed card is replaced")

	_, page = c.get("/holds?workflow=summarize-thread")
	require.Contains(t, page, "Nothing is waiting", "the filter by workflow keeps other workflows' holds out")
	_, page = c.get("/holds?workflow=draft-memo&requester=slack:U1")
	require.Contains(t, page, second.ID)
	require.Contains(t, page, `hx-get="/holds/live?requester=slack%3AU1&amp;workflow=%2Fdraft-memo"`, "the live part keeps the filters")
	_, page = c.get("/holds?requester=user:nobody")
	require.Contains(t, page, "Nothing is waiting")
	require.Contains(t, page, "No decisions yet.", "the requester filter applies to the history too")
	_, page = c.get("/holds?requester=slack:U1")
	require.Contains(t, page, `id="decided-holds"`)
	require.Contains(t, page, first.ID, "the decided history under the same filter")
}

func TestRunNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")
	viewer := b.signedIn(t, "viewer")

	_, page := viewer.get("/workflows/draft-memo")
	require.NotContains(t, page, "Run now")
	status, _, _ := viewer.post("/workflows/draft-memo/enqueue", url.Values{"brief": {"x"}})
	require.Equal(t, http.StatusForbidden, status)

	_, page = steward.get("/workflows/draft-memo")
	require.Contains(t, page, "Run now")
	status, page, _ = steward.post("/workflows/draft-memo/enqueue", url.Values{"brief": {""}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "Write a brief")

	status, _, resp := steward.post("/workflows/draft-memo/enqueue", url.Values{"brief": {"Herons at dusk"}, "dedupe_key": {"k1"}})
	require.Equal(t, http.StatusSeeOther, status)
	loc := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/sessions/"), loc)
	s, err := b.sess.GetByID(ctx, strings.TrimPrefix(loc, "/sessions/"))
	require.NoError(t, err)
	require.Equal(t, store.OriginWorkflow, s.Origin)
	require.Eventually(t, func() bool {
		_, page := steward.get(loc)
		return strings.Contains(page, `data-type="hold_opened"`)
	}, 20*time.Second, 50*time.Millisecond, "the hold card appears in the transcript")

	status, _, resp = steward.post("/workflows/draft-memo/enqueue", url.Values{"brief": {"Herons again"}, "dedupe_key": {"k1"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, loc, resp.Header.Get("Location"), "the same dedupe key is the same item")
	_, page = steward.get(loc)
	require.Contains(t, page, "already exists")

	admin := b.signedIn(t, "admin")
	status, _, _ = admin.post("/workflows/draft-memo/status", url.Values{"status": {"paused"}})
	require.Equal(t, http.StatusSeeOther, status)
	long := strings.Repeat("a paused brief that goes on ", 400) // past what a URL would carry
	status, page, _ = steward.post("/workflows/draft-memo/enqueue", url.Values{"brief": {long}, "dedupe_key": {"k2"}})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "not live")
	require.Contains(t, page, ">"+strings.TrimSpace(long)+"</textarea>", "the brief is kept for another try, however long")
	require.Contains(t, page, `value="k2"`, "and the dedupe key")
}

func TestRunsPageOlderLink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	viewer := b.signedIn(t, "viewer")
	for _, brief := range []string{"first", "second", "third"} {
		b.heldRun(t, "slack:U9", brief)
	}
	all, err := b.db.RunList(context.Background(), &store.RunListParams{})
	require.NoError(t, err)
	require.Len(t, all, 3)

	_, page := viewer.get("/runs?status=suspended&limit=2")
	require.Contains(t, page, all[0].ID)
	require.Contains(t, page, all[1].ID)
	require.NotContains(t, page, all[2].ID)
	m := regexp.MustCompile(`href="(/runs\?[^"]+)" rel="next"`).FindStringSubmatch(page)
	require.NotNil(t, m, "a full page links to older runs")
	require.Contains(t, page, ">Older runs</a>")
	older := html.UnescapeString(m[1])
	require.Contains(t, older, "status=suspended", "the link keeps the filter")

	status, page := viewer.get(older)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, all[2].ID)
	require.NotContains(t, page, all[0].ID)
	require.NotContains(t, page, `rel="next"`, "the last page links nowhere")
}

// A reply workflow answers in a conversation, so its Run now opens one in
// the console: the run's reply lands in that session, never a failed
// dispatch for want of somewhere to reply.
func TestRunNowReplyWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	steward := b.signedIn(t, "steward")

	_, page := steward.get("/workflows/summarize-thread")
	require.Contains(t, page, "Run now")
	require.Contains(t, page, "the brief starts a new console session")
	require.NotContains(t, page, `name="dedupe_key"`, "a conversation's run is keyed by its message")

	status, _, resp := steward.post("/workflows/summarize-thread/enqueue", url.Values{"brief": {"Herons at dusk"}})
	require.Equal(t, http.StatusSeeOther, status)
	loc := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/sessions/"), loc)
	s, err := b.sess.GetByID(ctx, strings.TrimPrefix(loc, "/sessions/"))
	require.NoError(t, err)
	require.Equal(t, store.OriginUser, s.Origin, "a console conversation")
	var run *store.Run
	require.Eventually(t, func() bool {
		runs, err := b.db.RunList(ctx, &store.RunListParams{SessionID: s.ID})
		require.NoError(t, err)
		if len(runs) == 1 && runs[0].Status != store.RunRunning {
			run = runs[0]
			return true
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the run ends")
	require.Equal(t, store.RunSucceeded, run.Status, run.Error)
	require.Equal(t, "/summarize-thread", run.Command)
	require.Eventually(t, func() bool {
		_, page := steward.get(loc)
		return strings.Contains(page, `data-type="assistant_message"`) && strings.Contains(page, "Herons at dusk")
	}, 20*time.Second, 50*time.Millisecond, "the reply is in the session")
}

// Deciders and requesters are named for people on every page: an API key
// by its name, never by the engine's key:<id> identity or its id alone.
func TestDeciderNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	viewer := b.signedIn(t, "viewer")
	k, err := b.db.APIKeyCreate(ctx, &store.APIKey{Name: "ci-bot", Role: store.RoleSteward, KeyHash: store.HashContent("ci-bot")})
	require.NoError(t, err)
	_, h := b.heldRun(t, "key:"+k.ID, "asked by a key")
	_, h2 := b.heldRun(t, "user:someone", "decided by a key")
	_, err = b.eng.Decide(ctx, engine.DecideParams{HoldID: h2.ID, Decision: "reject", Comment: "no",
		Decider: engine.Decider{KeyID: k.ID, Role: store.RoleSteward, Via: "api"}})
	require.NoError(t, err)
	waitRun(t, b, h2.RunID, store.RunCancelled)
	for _, path := range []string{"/holds/" + h.ID, "/holds/" + h2.ID, "/runs/" + h2.RunID, "/sessions/" + h2.SessionID, "/holds"} {
		_, page := viewer.get(path)
		require.Contains(t, page, "API key “ci-bot”", path)
		require.NotContains(t, page, "cancelled (cancelled)", path)
		// (The requester filter's option values may hold the identity.)
		for _, shown := range []string{"API key " + k.ID, ">key:" + k.ID, " key:" + k.ID} {
			require.NotContains(t, page, shown, path+" "+regexp.MustCompile(`.{0,120}`+k.ID+`.{0,60}`).FindString(page))
		}
	}
}

// A run held twice (its Token budget, then its output review) shows both
// holds on its page, each with its audit, and both waits in its timeline.
func TestRunPageShowsEveryHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	doc := strings.ReplaceAll(`# Two gates

## Trigger
- **Command** ¦/two-gates¦
- **Status** ¦live¦
- **Summary** held for its budget and its output

## Load Contract

## Steps
1. **Process** Draft.
   ¦¦¦prompt
   # {{.Payload.title}}

   {{.Payload.brief}}
   ¦¦¦
2. **Process** Again.
   ¦¦¦prompt
   {{.Payload.brief}} again
   ¦¦¦
3. **Output** Dispatch.

## Policy
- **Approval** ¦hold¦
- **Token budget** ¦1¦
`, "¦", "`")
	_, _, err := b.lib.ImportWorkflow(ctx, "", doc)
	require.NoError(t, err)
	item, _, err := b.eng.Enqueue(ctx, engine.EnqueueParams{Command: "/two-gates", Payload: map[string]any{"title": "Otters", "brief": "count otters"}, OwnerUID: "slack:U9"})
	require.NoError(t, err)
	steward := engine.Decider{UserID: b.users["steward"].ID, Username: "steward", Role: store.RoleSteward, Via: "console"}
	var decided []string
	for range 2 {
		var open *store.Hold
		require.Eventually(t, func() bool {
			hs, err := b.db.HoldList(ctx, &store.HoldListParams{SessionID: item.SessionID, Status: store.HoldOpen})
			if err == nil && len(hs) == 1 {
				open = hs[0]
			}
			return open != nil
		}, 20*time.Second, 20*time.Millisecond)
		_, err := b.eng.Decide(ctx, engine.DecideParams{HoldID: open.ID, Decision: "approve", Comment: "go on " + open.GateLabel, Decider: steward})
		require.NoError(t, err)
		decided = append(decided, open.ID)
	}
	run := waitRun(t, b, store.RunIDForItem(item.ID), store.RunSucceeded)
	_, page := b.signedIn(t, "viewer").get("/runs/" + run.ID)
	for _, id := range decided {
		require.Contains(t, page, `id="hold-`+id+`"`, "every hold of the run is on its page")
	}
	require.Contains(t, page, "go on Token budget", "the budget hold's audit")
	require.Contains(t, page, "go on Review", "and the review's")
	require.Equal(t, 2, strings.Count(page, "Waiting for approval"), "both waits are in the timeline")
}
