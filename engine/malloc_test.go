//go:build linux

package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunsReuseFreedMemory: in WAL mode a SQLite reader connection drops
// its page cache whenever another connection has committed since its last
// read, so on a busy engine every read frees and re-allocates its pages.
// With glibc's default trim threshold the freed heap went back to the
// kernel and came back as fresh zeroed pages: ~40 minor faults per run,
// 5.7 % of the process's CPU samples. Not parallel: the fault count is the
// process's.
func TestRunsReuseFreedMemory(t *testing.T) {
	e, _, _ := benchEngineWith(t, minimalDoc)
	var finished atomic.Int64
	e.Subscribe(func(ev Event) {
		if ev.Kind == EventRunFinished {
			finished.Add(1)
		}
	})
	ctx := context.Background()
	var enqueued int
	runs := func(n int) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range n / 4 {
					_, _, err := e.Enqueue(ctx, EnqueueParams{Command: "/bench", DedupeKey: fmt.Sprint(enqueued, "-", g, "-", i),
						Payload: map[string]any{"title": "Bench", "brief": "one two three"}})
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		enqueued += n
		require.Eventually(t, func() bool { return finished.Load() == int64(enqueued) }, time.Minute, time.Millisecond)
	}
	runs(400) // the heap grows to its working size
	const n = 1600
	before := minorFaults(t)
	runs(n)
	perRun := float64(minorFaults(t)-before) / n
	t.Logf("%.1f minor page faults per run", perRun)
	require.Less(t, perRun, 10.0, "freed heap is going back to the kernel")
}

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Minflt
}
