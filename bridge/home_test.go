package bridge_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

func holdsChannelCfg(c *bridge.Config) {
	stewardsCfg(c)
	c.HoldsChannel = "CHOLDS"
}

// TestConsoleDecisionUpdatesEveryCopy: a decision made in the console
// updates the thread's card, the holds channel's copy (which links the
// thread) and the App Home of a steward who had the hold listed, and tells
// the requester in the thread.
func TestConsoleDecisionUpdatesEveryCopy(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: holdsChannelCfg})
	grace := tb.consoleSteward(t, "grace", "UGRACE")
	tb.event(t, "EvH0", homeOpened("USTEWARD"))
	tb.homeHas(t, "USTEWARD", func(h string) bool { return strings.Contains(h, "Nothing is waiting") }, "an empty Home")

	root := tb.ts()
	tb.event(t, "EvH1", mention("CH", "U1", root, "", "draft-memo Herons\nHerons fish at dawn."))
	card, holdID := tb.holdCard(t, "CH", root)
	copyCard := tb.waitPost(t, "CHOLDS", "", func(c fakeslack.Call) bool { return strings.Contains(text(c), "hold:"+holdID) })
	require.Contains(t, text(copyCard), "<"+fakeslack.Permalink("CH", root)+"|the thread> in <#CH>", "the copy links the thread")
	require.Contains(t, text(copyCard), "*Herons*")
	require.Len(t, tb.slack.Calls("chat.getPermalink"), 1)
	for _, user := range []string{"USTEWARD", "UGRACE"} {
		home := tb.homeHas(t, user, func(h string) bool { return strings.Contains(h, `"hold:`+holdID+`"`) }, "the hold is listed")
		require.Contains(t, home, "*Herons*")
		require.Contains(t, home, `"hold_approve"`)
		require.Contains(t, home, `"hold_review"`)
		require.Contains(t, home, "<"+fakeslack.Permalink("CH", root)+"|thread>")
	}

	require.Equal(t, http.StatusSeeOther, grace.decide(holdID, "reject", "not this week"))
	tb.eventually(t, func() bool {
		return len(tb.updates("CH", card.TS)) == 1 && len(tb.updates("CHOLDS", copyCard.TS)) == 1
	}, 10*time.Second, "both copies are updated")
	for _, u := range []fakeslack.Call{tb.updates("CH", card.TS)[0], tb.updates("CHOLDS", copyCard.TS)[0]} {
		got := text(u)
		require.NotContains(t, got, "hold_approve", "buttons gone")
		require.NotContains(t, got, "waiting for a steward")
		require.Contains(t, got, "*Rejected* by grace via console at <!date^")
		require.Contains(t, got, "not this week")
		require.Contains(t, got, "Nothing was published")
		require.Contains(t, got, "*Herons*")
	}
	require.Contains(t, text(tb.updates("CHOLDS", copyCard.TS)[0]), fakeslack.Permalink("CH", root))
	told := tb.waitPost(t, "CH", root, func(c fakeslack.Call) bool { return strings.HasPrefix(c.Form["text"], "<@U1>") })
	require.Contains(t, told.Form["text"], "*Rejected* by grace via console")
	require.Contains(t, told.Form["text"], "not this week")
	tb.homeHas(t, "USTEWARD", func(h string) bool { return !strings.Contains(h, holdID) }, "the decided hold leaves the Home")
	tb.homeHas(t, "UGRACE", func(h string) bool { return !strings.Contains(h, holdID) }, "the decided hold leaves the Home")
}

// TestAppHome: a steward's Home lists the holds with buttons that decide
// (or open the review) as on cards, also for a hold from no Slack thread;
// anyone's Home lists their own recent runs; a non-steward is told why no
// holds are listed, and a refused click reaches them in their DM.
func TestAppHome(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvA1", mention("CA", "U1", root, "", "draft-memo Otters\nOtters hold hands."))
	card, holdID := tb.holdCard(t, "CA", root)

	tb.event(t, "EvA2", homeOpened("U1"))
	home := tb.homeHas(t, "U1", func(h string) bool { return strings.Contains(h, "Your recent runs") }, "U1's Home")
	require.Contains(t, home, "You are not a steward")
	require.Contains(t, home, "The stewards here are <@USTEWARD> and <@USTEWARD2>.", "who they may ask, not a setting's name")
	require.NotContains(t, home, "SLACK_STEWARDS")
	require.NotContains(t, home, "hold_approve")
	require.Contains(t, home, "_waiting for a steward_ <http://holdfast.test/runs/")
	require.Contains(t, home, "|Otters>", "the run's title")

	tb.event(t, "EvA3", homeOpened("USTEWARD"))
	tb.homeHas(t, "USTEWARD", func(h string) bool { return strings.Contains(h, `"hold:`+holdID+`"`) }, "listed")
	// Comment or edit… from the Home opens the review, as on the card.
	status, _ := tb.interact(t, map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"}, "trigger_id": "trig-home",
		"container": map[string]any{"type": "view", "view_id": "VHOME"},
		"actions":   []any{map[string]any{"action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID}}})
	require.Equal(t, http.StatusOK, status)
	require.Len(t, tb.slack.Views(), 1)
	require.Equal(t, "trig-home", tb.slack.Views()[0].TriggerID)

	require.Equal(t, http.StatusOK, tb.homeClick(t, "USTEWARD", "hold_approve", holdID))
	tb.eventually(t, func() bool { return len(tb.updates("CA", card.TS)) == 1 }, 10*time.Second)
	require.Contains(t, text(tb.updates("CA", card.TS)[0]), "*Approved* by <@USTEWARD> via slack")
	tb.homeHas(t, "USTEWARD", func(h string) bool { return !strings.Contains(h, holdID) }, "the approved hold leaves the Home")

	// A hold from no Slack thread (enqueued through the API) is listed too.
	body, _ := json.Marshal(map[string]any{"dedupeKey": "api-1", "payload": map[string]any{"title": "Kelp", "brief": "Kelp forests."}})
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+"/api/workflows/draft-memo/enqueue", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tb.keys[store.RoleSteward])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var apiHold *store.Hold
	tb.eventually(t, func() bool {
		hs, err := tb.store.HoldList(tb.ctx, &store.HoldListParams{Status: store.HoldOpen, Limit: 5})
		if err == nil && len(hs) == 1 {
			apiHold = hs[0]
		}
		return apiHold != nil
	}, 10*time.Second)
	tb.homeHas(t, "USTEWARD", func(h string) bool {
		return strings.Contains(h, `"hold:`+apiHold.ID+`"`) && strings.Contains(h, "*Kelp*")
	},
		"a hold from no thread is published to the Home as it opens")

	// A refused Home click on it reaches the user in their DM with the app.
	require.Equal(t, http.StatusOK, tb.homeClick(t, "UNOBODY", "hold_approve", apiHold.ID))
	dm := tb.waitPost(t, "UNOBODY", "", func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "can't approve this hold") })
	require.Contains(t, dm.Form["text"], "not a steward")
	h, err := tb.store.HoldGetByID(tb.ctx, apiHold.ID)
	require.NoError(t, err)
	require.Equal(t, store.HoldOpen, h.Status)
	require.Equal(t, http.StatusOK, tb.homeClick(t, "USTEWARD2", "hold_reject", apiHold.ID))
	tb.homeHas(t, "USTEWARD", func(h string) bool { return !strings.Contains(h, apiHold.ID) }, "decided: gone from the Home")
}

// TestAppHomeTitlesArePlain: a run's title is markdown its asker wrote; the
// Home shows it as text in its link, a | included.
func TestAppHomeTitlesArePlain(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvAT1", mention("CT", "U1", root, "", "draft-memo Please write up [otter facts](https://otters.test) | now\nOtters."))
	tb.holdCard(t, "CT", root)
	tb.event(t, "EvAT2", homeOpened("U1"))
	home := tb.homeHas(t, "U1", func(h string) bool { return strings.Contains(h, "Your recent runs") }, "U1's Home")
	require.Contains(t, home, "|Please write up otter facts ∣ now>")

	// A run with neither title nor brief (an API enqueue of a bare
	// payload) is named by its workflow, never by its id.
	it, _, err := tb.eng.Enqueue(tb.ctx, engine.EnqueueParams{Command: "/draft-memo", DedupeKey: "untitled",
		Payload: map[string]any{}, OwnerUID: "slack:U1"})
	require.NoError(t, err)
	tb.eventually(t, func() bool {
		got, err := tb.store.QueueItemGetByID(tb.ctx, it.ID)
		return err == nil && got.RunID != ""
	}, 10*time.Second)
	got, err := tb.store.QueueItemGetByID(tb.ctx, it.ID)
	require.NoError(t, err)
	tb.event(t, "EvAT3", homeOpened("U1"))
	home = tb.homeHas(t, "U1", func(h string) bool { return strings.Contains(h, "/runs/"+got.RunID) }, "the untitled run in U1's Home")
	require.Contains(t, home, "/runs/"+got.RunID+"|/draft-memo>")
	require.NotContains(t, home, "|"+got.RunID+">", "no run id as its name")
}
