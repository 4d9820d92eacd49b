package main

import (
	"context"
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
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

const crashWorkflow = `# Crash drafts

## Trigger
- **Command** ¦/crash-draft¦
- **Status** ¦live¦
- **Summary** Drafts through an OpenAI-compatible model

## Load Contract
- **Search** zqxnothing

## Steps
1. **Context** Search the library.
2. **Process** Draft.
   ¦¦¦prompt
   # {{.Payload.title}}

   {{.Payload.brief}}
   ¦¦¦
3. **Guard** Not empty.
4. **Output** Dispatch as a memo.

## Policy
- **Approval** ¦auto¦
- **Destination** ¦memo¦
- **Model** ¦openai:crash-model¦
- **Timeout** ¦2m¦
`

// TestCrashMidRunDispatchesEachItemOnce is SPEC §8's crash rule with the real
// binary: kill -9 while runs wait on the model, restart, and every item ends
// in exactly one settled run with exactly one memo. HOLDFAST_STUCK_RUN keeps
// its 10-minute default: the killed process's runs are taken over once its
// runner lease lapses (1.5 × HOLDFAST_PASS_INTERVAL), not once their
// heartbeats are ten minutes old.
func TestCrashMidRunDispatchesEachItemOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := bottest.Binary(t)

	llm := fakellm.New(true) // every call blocks until Unblock
	t.Cleanup(llm.Close)
	db := filepath.Join(dir, "holdfast.db")
	env := append(os.Environ(), "HOLDFAST_DB="+db, "HOLDFAST_PASS_INTERVAL=1s", "HOLDFAST_ADMIN_PASSWORD=crash-test-pw",
		"OPENAI_BASE_URL="+llm.URL, "OPENAI_API_KEY=sk-test", "HOLDFAST_WORKERS=4")

	wf := filepath.Join(dir, "crash.md")
	require.NoError(t, os.WriteFile(wf, []byte(strings.ReplaceAll(crashWorkflow, "¦", "`")), 0o644))
	require.NotContains(t, bottest.CLI(t, bin, env, "workflow", "import", wf), "crash.md:", "the workflow compiles")
	key := bottest.AdminKey(t, bin, env, "crash")

	first := bottest.Start(t, bin, env)
	const n = 20
	for i := range n {
		require.Equal(t, http.StatusCreated, bottest.JSON(t, http.MethodPost, first.URL+"/api/workflows/crash-draft/enqueue", key, map[string]any{
			"dedupeKey": fmt.Sprint("crash-", i),
			"payload":   map[string]any{"title": fmt.Sprint("Crash ", i), "brief": fmt.Sprintf("zqxcrash%d body", i)},
		}, nil))
	}
	// Wait until every worker is inside a model call, then pull the plug.
	require.Eventually(t, func() bool { return llm.Calls() >= 4 }, 30*time.Second, 10*time.Millisecond)
	first.Kill(t)

	llm.Unblock()
	second := bottest.Start(t, bin, env)
	require.Eventually(t, func() bool {
		var runs struct {
			Runs []struct{ Status, Command string }
		}
		if bottest.JSON(t, http.MethodGet, second.URL+"/api/runs?status=succeeded", key, nil, &runs) != http.StatusOK {
			return false
		}
		done := 0
		for _, r := range runs.Runs {
			if r.Command == "/crash-draft" {
				done++
			}
		}
		return done == n
	}, 60*time.Second, 100*time.Millisecond, "every item's run settles after recovery")

	// Graceful stop, then audit the database itself.
	second.Stop(t) // a clean shutdown waits for its workers
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: db})
	require.NoError(t, err)
	defer s.Close()
	runs, err := s.RunList(ctx, &store.RunListParams{Limit: 500})
	require.NoError(t, err)
	perItem := map[string]int{}
	recovered := 0
	for _, r := range runs {
		if r.Command != "/crash-draft" {
			continue
		}
		perItem[r.ItemID]++
		require.Equal(t, store.RunSucceeded, r.Status, r.Error)
		require.NotEmpty(t, r.DispatchMemoID)
		recovered += min(r.RecoveryAttempts, 1)
		item, err := s.QueueItemGetByID(ctx, r.ItemID)
		require.NoError(t, err)
		require.Equal(t, store.ItemDone, item.Status)
	}
	require.Len(t, perItem, n)
	for id, c := range perItem {
		require.Equal(t, 1, c, "item %s has one run", id)
	}
	require.Positive(t, recovered, "runs interrupted by the kill were recovered")
	for i := range n {
		ms, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: fmt.Sprintf("zqxcrash%d", i), IncludeUnlisted: true})
		require.NoError(t, err)
		require.Len(t, ms, 1, "item %d dispatched exactly one memo", i)
		require.Equal(t, fmt.Sprint("Crash ", i), ms[0].Title)
	}
}

func TestEnqueueCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"HOLDFAST_DB": filepath.Join(dir, "h.db")}
	wf := filepath.Join(dir, "crash.md")
	require.NoError(t, os.WriteFile(wf, []byte(strings.ReplaceAll(crashWorkflow, "¦", "`")), 0o644))
	_, err := runCLI(t, env, "", "workflow", "import", wf)
	require.NoError(t, err)

	out, err := runCLI(t, env, "", "enqueue", "/crash-draft", "--dedupe", "k1", "--payload", `{"brief":"b"}`)
	require.NoError(t, err)
	require.Contains(t, out, "enqueued /crash-draft item itm_")
	out, err = runCLI(t, env, "", "enqueue", "crash-draft", "--dedupe", "k1")
	require.NoError(t, err)
	require.Contains(t, out, "already enqueued")

	_, err = runCLI(t, env, "", "enqueue", "/crash-draft", "--dedupe", "k2", "--payload", `[1]`)
	require.ErrorContains(t, err, "JSON object")
	_, err = runCLI(t, env, "", "enqueue", "/crash-draft")
	require.ErrorContains(t, err, "usage")
	_, err = runCLI(t, env, "", "enqueue", "/nope", "--dedupe", "k")
	require.ErrorIs(t, err, store.ErrNotFound)
}
