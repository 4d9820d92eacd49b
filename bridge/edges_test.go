package bridge_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
)

// edgeWorkflow is a workflow memo: command, extra loads, prompt and policy
// lines; ¦ stands for a backtick. Its Guard refuses the word FORBIDDEN,
// except in reports (which quote what failed).
func edgeWorkflow(command, loads, prompt string, policy ...string) string {
	guard := "not_contains: FORBIDDEN"
	if strings.Contains(loads, "Edges") {
		guard = "min_chars: 1"
	}
	doc := "# Edge " + command + "\n\n## Trigger\n- **Command** ¦" + command + "¦\n- **Status** ¦live¦\n\n## Load Contract\n" + loads +
		"\n## Steps\n1. **Context** Load.\n2. **Process** Draft.\n   ¦¦¦prompt\n" + prompt +
		"\n   ¦¦¦\n3. **Guard** Clean.\n   ¦¦¦guard\n   " + guard + "\n   ¦¦¦\n4. **Output** Publish.\n\n## Policy\n"
	for _, p := range policy {
		doc += "- " + p + "\n"
	}
	return strings.ReplaceAll(doc, "¦", "`")
}

// TestEdgesOfUnderstanding produces each kind of edge once — a Guard
// failure, a model error, a dispatch conflict, a hold decided by its
// timeout, a refused decision, a broken workflow and a Slack delivery that
// does not parse — and reads each back from GET /api/edges and from a
// workflow's Edges context.
func TestEdgesOfUnderstanding(t *testing.T) {
	t.Parallel()
	llm := fakellm.New(false)
	t.Cleanup(llm.Close)
	llm.Fail.Store(http.StatusBadRequest)
	tb := setup(t, setupOpts{real: true, openai: llm.URL})
	lib := library.New(tb.store, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := tb.ctx
	prompt := "   # {{.Payload.title}}\n\n   {{.Payload.brief}}"
	for _, doc := range []string{
		edgeWorkflow("/e-guard", "", prompt, "**Approval** ¦auto¦"),
		edgeWorkflow("/e-model", "", prompt, "**Model** ¦openai:m¦", "**Retries** ¦0¦"),
		edgeWorkflow("/e-conflict", "- **Trigger** payload.targetMemoId\n", prompt, "**Approval** ¦hold¦"),
		edgeWorkflow("/e-timeout", "", prompt, "**Approval** ¦hold¦", "**Hold timeout** ¦1s¦"),
		edgeWorkflow("/e-report", "- **Edges** ¦7d¦\n",
			"   # Edges\n\n   {{range .Edges.Kinds}}{{.Kind}}={{.Count}}\n   {{end}}{{range .Context}}{{if eq .Class \"edges\"}}{{.Body}}{{end}}{{end}}",
			"**Approval** ¦auto¦"),
	} {
		m, _, err := lib.ImportWorkflow(ctx, "", doc)
		require.NoError(t, err)
		w, err := tb.store.WorkflowGetByMemoID(ctx, m.ID)
		require.NoError(t, err)
		require.Empty(t, w.Errors, doc)
	}
	_, _, err := lib.ImportWorkflow(ctx, "", "# Broken\n\n## Trigger\n- **Command** `/e-broken`\n")
	require.NoError(t, err)

	finished := make(chan engine.Event, 64)
	tb.eng.Subscribe(func(ev engine.Event) {
		if ev.Kind == engine.EventRunFinished {
			finished <- ev
		}
	})
	waitFinished := func(t *testing.T, itemID string) *store.Run {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case ev := <-finished:
				if ev.ItemID == itemID {
					r, err := tb.store.RunGetByID(ctx, ev.RunID)
					require.NoError(t, err)
					return r
				}
			case <-deadline:
				t.Fatalf("item %s never finished", itemID)
			}
		}
	}
	enqueue := func(t *testing.T, command string, payload map[string]any) *store.QueueItem {
		t.Helper()
		it, _, err := tb.eng.Enqueue(ctx, engine.EnqueueParams{Command: command, DedupeKey: command, Payload: payload, OwnerUID: "user:u1"})
		require.NoError(t, err)
		return it
	}
	steward := engine.Decider{SlackUserID: "USTEWARD", Via: "slack"}

	// Each subtest adds one edge to the same store; the last two read them
	// all back. They run in order.
	var guard, modelRun, conflictRun, timedOutRun *store.Run
	var timeoutHold *store.Hold
	var cardHold string
	t.Run("GuardAndModel", func(t *testing.T) {
		guard = waitFinished(t, enqueue(t, "/e-guard", map[string]any{"title": "G", "brief": "FORBIDDEN"}).ID)
		require.Equal(t, engine.KindGuard, guard.ErrorKind)
		modelRun = waitFinished(t, enqueue(t, "/e-model", map[string]any{"title": "M", "brief": "b"}).ID)
		require.Equal(t, engine.KindModel, modelRun.ErrorKind)
	})

	t.Run("DispatchConflict", func(t *testing.T) {
		// The stub is edited while the run waits for review.
		stub, err := tb.store.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stub", Body: "stub"})
		require.NoError(t, err)
		conflict := enqueue(t, "/e-conflict", map[string]any{"title": "C", "brief": "b", "targetMemoId": stub.ID})
		var held *store.Hold
		tb.eventually(t, func() bool {
			hs, err := tb.store.HoldList(ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: conflict.SessionID, Limit: 1})
			if err == nil && len(hs) == 1 {
				held = hs[0]
			}
			return held != nil
		}, 20*time.Second)
		edited := "a human edit"
		_, err = tb.store.MemoUpdate(ctx, &store.MemoUpdateParams{ID: stub.ID, ExpectedVersion: stub.ContentVersion, Body: &edited})
		require.NoError(t, err)
		_, err = tb.eng.Decide(ctx, engine.DecideParams{HoldID: held.ID, Decision: "approve", Decider: steward})
		require.NoError(t, err)
		conflictRun = waitFinished(t, conflict.ID)
		require.Equal(t, engine.KindDispatchConflict, conflictRun.ErrorKind)
	})

	t.Run("HoldTimeout", func(t *testing.T) {
		timedOut := enqueue(t, "/e-timeout", map[string]any{"title": "T", "brief": "b"})
		timedOutRun = waitFinished(t, timedOut.ID)
		require.Equal(t, store.RunCancelled, timedOutRun.Status)
		var err error
		timeoutHold, err = tb.store.HoldGetByID(ctx, timedOutRun.HoldID)
		require.NoError(t, err)
		require.Equal(t, "timeout", timeoutHold.DecidedVia)
	})

	t.Run("RefusedDecision", func(t *testing.T) {
		// Someone who is no steward clicks Approve on a card.
		root := tb.ts()
		tb.event(t, "EvEdge1", mention("CX", "U1", root, "", "draft-memo Otters\nOtters hold hands."))
		var card fakeslack.Call
		card, cardHold = tb.holdCard(t, "CX", root)
		require.Equal(t, http.StatusOK, tb.click(t, "UEVE", "hold_approve", cardHold, "CX", card.TS, root))
		tb.eventually(t, func() bool {
			audit, err := tb.store.HoldDecisionList(ctx, cardHold)
			return err == nil && len(audit) == 1 && audit[0].Outcome == store.AttemptRefused
		}, 10*time.Second)
	})

	t.Run("UnparsedDelivery", func(t *testing.T) {
		// Its inner event is not a message.
		bad, _ := json.Marshal(map[string]any{"type": "event_callback", "event_id": "EvEdgeBad", "team_id": fakeslack.TeamID,
			"event": map[string]any{"type": "app_mention", "channel": 42, "user": "U1"}})
		status, body := tb.post(t, "/slack/events", "application/json", bad)
		require.Equal(t, http.StatusOK, status, body)
		tb.inboxDrained(t)
	})

	t.Run("API", func(t *testing.T) {
		var got struct {
			Edges []struct {
				Kind, Source, Label string
				Count               int64
				Latest              []struct{ RunID, HoldID, WorkflowMemoID, Key, By, Link, Message string }
			}
		}
		req, err := http.NewRequest(http.MethodGet, tb.srv.URL+"/api/edges?since=7d", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tb.keys[store.RoleViewer])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		resp.Body.Close()
		byKind := map[string]int{}
		for i, e := range got.Edges {
			byKind[e.Kind] = i
		}
		broken, err := tb.store.WorkflowGetByCommand(ctx, "/e-broken")
		require.NoError(t, err)
		for kind, link := range map[string]string{
			engine.KindGuard:            "/runs/" + guard.ID,
			engine.KindModel:            "/runs/" + modelRun.ID,
			engine.KindDispatchConflict: "/runs/" + conflictRun.ID,
			store.EdgeHoldTimeout:       "/holds/" + timeoutHold.ID,
			store.EdgeDecisionRefused:   "/holds/" + cardHold,
			store.EdgeWorkflowBroken:    "/workflows/e-broken",
			store.EdgeSlackUnhandled:    "",
		} {
			i, ok := byKind[kind]
			require.True(t, ok, "%s is reported: %+v", kind, got.Edges)
			e := got.Edges[i]
			require.Equal(t, int64(1), e.Count, kind)
			require.NotEmpty(t, e.Label, kind)
			require.Len(t, e.Latest, 1, kind)
			require.Equal(t, link, e.Latest[0].Link, kind)
			require.NotEmpty(t, e.Latest[0].Message, kind)
		}
		require.Equal(t, broken.MemoID, got.Edges[byKind[store.EdgeWorkflowBroken]].Latest[0].WorkflowMemoID)
		require.Equal(t, "EvEdgeBad", got.Edges[byKind[store.EdgeSlackUnhandled]].Latest[0].Key)
		require.Equal(t, "slack:UEVE", got.Edges[byKind[store.EdgeDecisionRefused]].Latest[0].By)
	})

	t.Run("EdgesLoad", func(t *testing.T) {
		// The same report, as a workflow's Edges load sees it.
		report := waitFinished(t, enqueue(t, "/e-report", nil).ID)
		require.Equal(t, store.RunSucceeded, report.Status, report.Error)
		memo, err := tb.store.MemoGetByID(ctx, report.DispatchMemoID)
		require.NoError(t, err)
		for _, want := range []string{"guard=1", "model=1", "dispatch_conflict=1", "hold_timeout=1", "decision_refused=1",
			"workflow_broken=1", "slack_unhandled=1", engine.EdgeLabel(store.EdgeSlackUnhandled) + "**: 1", "EvEdgeBad",
			"`" + guard.ID + "`", "`" + cardHold + "`"} {
			require.Contains(t, memo.Body, want)
		}
	})
}
