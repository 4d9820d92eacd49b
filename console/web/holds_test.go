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

	"github.com/holdfast-bot/holdfast/store"
)

func waitRun(t *testing.T, b *bundle, runID, status string) *store.Run {
	t.Helper()
	var run *store.Run
	require.Eventually(t, func() bool {
		r, err := b.db.RunGetByID(context.Background(), runID)
		require.NoError(t, err)
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
		_, page = viewer.get("/holds/" + hold.ID)
		require.NotContains(t, page, `name="decision"`)
		status, page, _ := viewer.post("/holds/"+hold.ID+"/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, page, "not a steward")
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

		status, page, _ = steward.post("/holds/"+hold.ID+"/decision", url.Values{"decision": {"reject"}})
		require.Equal(t, http.StatusConflict, status)
		require.Contains(t, page, "steward", "the conflict names who decided")
	})

	t.Run("ApproveEditedOutput", func(t *testing.T) {
		_, h := b.heldRun(t, "slack:U9", "edit me")
		edited := "# Edited title\r\n\r\nA steward rewrote this."
		status, _, _ := steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}, "output": {edited}})
		require.Equal(t, http.StatusSeeOther, status)
		run := waitRun(t, b, h.RunID, store.RunSucceeded)
		m, err := b.db.MemoGetByID(ctx, run.DispatchMemoID)
		require.NoError(t, err)
		require.Equal(t, "# Edited title\n\nA steward rewrote this.", m.Body, "the edited text is what is dispatched")
		require.Equal(t, "Edited title", m.Title)
	})

	t.Run("RejectWithReason", func(t *testing.T) {
		_, h := b.heldRun(t, "slack:U9", "reject me")
		status, _, _ := steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"reject"}, "comment": {"off topic"}})
		require.Equal(t, http.StatusSeeOther, status)
		waitRun(t, b, h.RunID, store.RunCancelled)
		got, err := b.db.HoldGetByID(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, "off topic", got.Comment)
		status, _, _ = steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"maybe"}})
		require.Equal(t, http.StatusBadRequest, status)
		status, _, _ = steward.post("/holds/hld_missing/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusNotFound, status)
	})

	t.Run("NoSelfApproval", func(t *testing.T) {
		_, h := b.heldRun(t, "user:"+b.users["steward"].ID, "my own")
		_, page := steward.get("/holds/" + h.ID)
		require.Contains(t, page, "another steward must approve it")
		status, page, _ := steward.post("/holds/"+h.ID+"/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusForbidden, status)
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
		status, _ = viewer.get("/runs/run_missing")
		require.Equal(t, http.StatusNotFound, status)
		status, _ = viewer.get("/holds/hld_missing")
		require.Equal(t, http.StatusNotFound, status)
	})
}

func TestHoldsQueueFragment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, "steward")
	_, page := c.get("/holds")
	require.Contains(t, page, "Nothing is waiting")
	sig := page[strings.Index(page, "sig=")+4:]
	sig = sig[:strings.Index(sig, `"`)]
	status, _ := c.get("/holds?fragment=open&sig=" + sig)
	require.Equal(t, http.StatusNoContent, status, "an unchanged queue is not re-sent")
	_, hold := b.heldRun(t, "slack:U1", "fragment")
	status, frag := c.get("/holds?fragment=open&sig=" + sig)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, frag, hold.ID)
	require.NotContains(t, frag, "<html", "a fragment, not a page")
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
	status, page, _ = steward.post("/workflows/draft-memo/enqueue", url.Values{"brief": {"paused"}})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "not live")
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
