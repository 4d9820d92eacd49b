package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/store/sqlite/sqlitetest"
)

// benchWorkflow is issue 16's minimal workflow: the template model's render
// of the brief, dispatched as a memo.
const benchWorkflow = `# Bench drafts

## Trigger
- **Command** ¦/bench-draft¦
- **Status** ¦live¦
- **Summary** Minimal: template → memo

## Load Contract

## Steps
1. **Process** Draft.
   ¦¦¦prompt
   # {{.Payload.title}}

   {{.Payload.brief}}
   ¦¦¦
2. **Output** Dispatch as a memo.

## Policy
- **Approval** ¦auto¦
- **Destination** ¦memo¦
- **Timeout** ¦30s¦
`

// BenchmarkBinaryHTTPRunsPerSecond is the end-to-end figure of issue 16
// through the real binary: `bot serve` (SQLite, synchronous=FULL, 4
// workers), 8 HTTP clients enqueueing b.N items of the minimal workflow
// through the API; the clock stops at the last run's finish as the server's
// database records it (completion is seen on its
// holdfast_runs_finished_total). It reports runs/s, requests/s of the
// enqueue phase and the server's CPU per run.
func BenchmarkBinaryHTTPRunsPerSecond(b *testing.B) {
	dir := b.TempDir()
	bin := bottest.Binary(b)
	const internal = "bench-internal-key"
	env := append(os.Environ(), "HOLDFAST_DB="+filepath.Join(dir, "holdfast.db"), "HOLDFAST_ADMIN_PASSWORD=bench-pw",
		"HOLDFAST_WORKERS=4", "HOLDFAST_DB_SYNC=full", "HOLDFAST_INTERNAL_KEY="+internal)
	wf := filepath.Join(dir, "bench.md")
	if err := os.WriteFile(wf, []byte(strings.ReplaceAll(benchWorkflow, "¦", "`")), 0o644); err != nil {
		b.Fatal(err)
	}
	if out := bottest.CLI(b, bin, env, "workflow", "import", wf); strings.Contains(out, "bench.md:") {
		b.Fatalf("the workflow does not compile:\n%s", out)
	}
	key := bottest.AdminKey(b, bin, env, "bench")
	p := bottest.Start(b, bin, env)
	defer p.Stop(b)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	commits := sqlitetest.CommitsPerSecond(b, dir)
	n := max(b.N, 200)
	finished0 := runsFinished(b, client, p.URL, internal)
	cpu0 := procCPU(b, p.Cmd.Process.Pid)
	b.ResetTimer()
	start := time.Now()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				raw, _ := json.Marshal(map[string]any{"dedupeKey": fmt.Sprint("bench-", i),
					"payload": map[string]any{"title": "Bench", "brief": "one two three"}})
				req, _ := http.NewRequest(http.MethodPost, p.URL+"/api/workflows/bench-draft/enqueue", bytes.NewReader(raw))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("enqueue: status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	enqueued := time.Since(start)
	deadline := time.Now().Add(5 * time.Minute)
	for runsFinished(b, client, p.URL, internal)-finished0 < n {
		if time.Now().After(deadline) {
			b.Fatalf("runs did not finish\n%s", p.Log())
		}
		// Polling the server's counter, with a deadline, seldom: every
		// scrape counts the queue, and at every 5 ms the scrapes were 6 %
		// of the server's CPU. The clock stops at the last run's finish
		// as the database recorded it, not at the poll that saw it.
		time.Sleep(100 * time.Millisecond)
	}
	cpu := procCPU(b, p.Cmd.Process.Pid) - cpu0
	elapsed := lastFinished(b, filepath.Join(dir, "holdfast.db")).Sub(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(n)/enqueued.Seconds(), "requests/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "server-cpu-ms/run")
	b.ReportMetric(commits, "commits/s")
}

// lastFinished is when the server finished its last run, read from its
// database (times are stored as RFC 3339 in UTC).
func lastFinished(b *testing.B, path string) time.Time {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var last string
	if err := db.QueryRow(`SELECT MAX(finished_at) FROM workflow_runs`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	t, err := time.Parse(time.RFC3339Nano, last)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// runsFinished reads holdfast_runs_finished_total{status="succeeded"} from
// the server's /metrics.
func runsFinished(b *testing.B, client *http.Client, base, key string) int {
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, `holdfast_runs_finished_total{status="succeeded"}`) {
			f, _ := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndex(line, " "):]), 64)
			return int(f)
		}
	}
	return 0
}

// procCPU is a process's user+system CPU time so far, from /proc.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th fields of the whole line, in clock ticks (100/s).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
