package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// start runs b.eng until the test ends (for bundles set up with noStart,
// so that work can be queued before the first pass).
func (b *testBundle) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.eng.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFinished waits until every item in ids has a run_finished event and
// returns their runs as stored.
func (b *testBundle) waitFinished(t *testing.T, ids ...string) map[string]*store.Run {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]*store.Run{}
	deadline := time.After(15 * time.Second)
	for len(out) < len(want) {
		select {
		case ev := <-b.events:
			if ev.Kind != EventRunFinished || !want[ev.ItemID] {
				continue
			}
			r, err := b.db.RunGetByID(context.Background(), ev.RunID)
			require.NoError(t, err)
			out[ev.ItemID] = r
		case <-deadline:
			t.Fatalf("timed out: %d of %d items finished", len(out), len(want))
		}
	}
	return out
}

// TestItemsSharingASessionAllRun is SPEC §4.2: pending items that share a
// session are claimed together and every one of them runs, whether a pool
// worker or one synchronous pass takes them.
func TestItemsSharingASessionAllRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		shared int
		pass   bool
	}{
		{name: "PoolThreeShared", shared: 3},
		{name: "PoolSixShared", shared: 6},
		{name: "PassThreeShared", shared: 3, pass: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, setupOpts{noStart: true})
			b.workflow(t, "/draft")
			ses, err := b.db.SessionCreate(ctx, &store.SessionCreateParams{Title: "shared", Origin: store.OriginUser, Policy: "auto"})
			require.NoError(t, err)
			var ids []string
			for i := range tc.shared {
				ids = append(ids, b.enqueue(t, EnqueueParams{Command: "/draft", SessionID: ses.ID,
					Payload: map[string]any{"title": fmt.Sprint("Shared ", i), "brief": "b"}}).ID)
			}
			alone := b.enqueue(t, EnqueueParams{Command: "/draft", Payload: map[string]any{"title": "Alone", "brief": "b"}})
			ids = append(ids, alone.ID)

			var runs map[string]*store.Run
			if tc.pass {
				res, err := b.eng.RunPass(ctx)
				require.NoError(t, err, "one pass claims items sharing a session")
				require.Equal(t, len(ids), res.Started)
				require.Zero(t, res.FailedItems)
				runs = map[string]*store.Run{}
				for _, id := range ids {
					r, err := b.db.RunGetByID(ctx, store.RunIDForItem(id))
					require.NoError(t, err)
					runs[id] = r
				}
			} else {
				b.start(t)
				runs = b.waitFinished(t, ids...)
			}
			for id, r := range runs {
				require.Equal(t, store.RunSucceeded, r.Status, "item %s: %s", id, r.Error)
			}
			evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: ses.ID, Limit: 1000})
			require.NoError(t, err)
			started := 0
			for i, ev := range evs {
				if i > 0 {
					require.True(t, ev.TS.After(evs[i-1].TS), "the shared transcript keeps a strict order")
				}
				if ev.Type == EventRunStarted {
					started++
				}
			}
			require.Equal(t, tc.shared, started, "each shared item's run_started is in the session")
		})
	}
}
