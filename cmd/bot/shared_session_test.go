package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
)

// TestBinaryRunsItemsSharingASession is issue 9's wedge with the real
// binary: three items of one session, pending together, are claimed in one
// pass beside an item of no session, and all of them run (SPEC §4.2). One
// worker, held in a model call on the first item, makes the three queue up
// so that its next claim takes them together.
func TestBinaryRunsItemsSharingASession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := bottest.Binary(t)
	llm := fakellm.New(true)
	t.Cleanup(llm.Close)
	env := append(os.Environ(), "HOLDFAST_DB="+filepath.Join(dir, "holdfast.db"), "HOLDFAST_ADMIN_PASSWORD=shared-session-pw",
		"OPENAI_BASE_URL="+llm.URL, "OPENAI_API_KEY=sk-test", "HOLDFAST_WORKERS=1")
	wf := filepath.Join(dir, "draft.md")
	require.NoError(t, os.WriteFile(wf, []byte(strings.ReplaceAll(crashWorkflow, "¦", "`")), 0o644))
	bottest.CLI(t, bin, env, "workflow", "import", wf)
	key := bottest.AdminKey(t, bin, env, "shared")

	p := bottest.Start(t, bin, env)
	enqueue := func(dedupe, sessionID string) string {
		var out struct{ Item struct{ ID string } }
		require.Equal(t, http.StatusCreated, bottest.JSON(t, http.MethodPost, p.URL+"/api/workflows/crash-draft/enqueue", key, map[string]any{
			"dedupeKey": dedupe, "sessionId": sessionID,
			"payload": map[string]any{"title": "Shared " + dedupe, "brief": "zqx" + dedupe},
		}, &out))
		return out.Item.ID
	}
	items := []string{enqueue("alone", "")}
	select { // the one worker is now inside the first item's model call
	case <-llm.Arrived():
	case <-time.After(30 * time.Second):
		t.Fatal("the first item's run never called the model")
	}
	var ses struct{ ID string }
	require.Equal(t, http.StatusCreated, bottest.JSON(t, http.MethodPost, p.URL+"/api/sessions", key, map[string]any{"title": "Shared"}, &ses))
	for i := range 3 {
		items = append(items, enqueue(fmt.Sprint("shared-", i), ses.ID))
	}
	llm.Unblock()

	require.Eventually(t, func() bool {
		for _, id := range items {
			var it struct{ Status string }
			if bottest.JSON(t, http.MethodGet, p.URL+"/api/queue/"+id, key, nil, &it) != http.StatusOK || it.Status != "done" {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every item runs to done")
	for _, id := range items {
		var r struct{ Status, Error string }
		require.Equal(t, http.StatusOK, bottest.JSON(t, http.MethodGet, p.URL+"/api/runs/run_"+strings.TrimPrefix(id, "itm_"), key, nil, &r))
		require.Equal(t, "succeeded", r.Status, r.Error)
	}
	var evs struct {
		Events []struct{ TS, Type string }
	}
	require.Equal(t, http.StatusOK, bottest.JSON(t, http.MethodGet, p.URL+"/api/sessions/"+ses.ID+"/events", key, nil, &evs))
	started := 0
	for i, ev := range evs.Events {
		if i > 0 {
			require.Greater(t, ev.TS, evs.Events[i-1].TS, "the session's transcript keeps a strict order")
		}
		if ev.Type == "run_started" {
			started++
		}
	}
	require.Equal(t, 3, started)
	require.NotContains(t, p.Log(), "claiming queue items", "no claim failed")
}
