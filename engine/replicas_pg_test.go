package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// Items enqueued through three replicas at once all run without waiting for
// the tick (30 s here): replicas list the same pending heads and race to
// claim them, and a worker whose batch came back short because another
// replica won some of its heads must look again. When a short batch ended
// the look, 2 rounds in 10 of this load left items pending until the tick.
func TestReplicasDrainTheQueueWithoutTheTick(t *testing.T) {
	engines, dbs, _ := pgReplicas(t, 3)
	ctx := context.Background()
	const perRound = 150
	for round := range 4 {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				e := engines[g%len(engines)]
				for i := g; i < perRound; i += 8 {
					if _, _, err := e.Enqueue(ctx, EnqueueParams{Command: "/bench", DedupeKey: fmt.Sprintf("r%d-%d", round, i),
						Payload: map[string]any{"title": "Replicas", "brief": "drain"}}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		want := int64((round + 1) * perRound)
		start := time.Now()
		require.Eventually(t, func() bool {
			c, err := dbs[0].QueueItemCountByStatus(ctx)
			return err == nil && c[store.ItemDone]+c[store.ItemFailed] >= want
		}, 10*time.Second, 20*time.Millisecond, "round %d: every item ran without the tick", round)
		t.Logf("round %d: drained %v after the last enqueue", round, time.Since(start).Round(time.Millisecond))
	}
}
