package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// inboxClaimCostIsFlatInBacklog: a claim costs the same whether 200
// deliveries wait or 20,000, spread over as many threads or queued in one.
// A claim that walks every pending delivery makes a backlog drain in
// quadratic time, just when the service is catching up; on SQLite it also
// holds up every other write, acks of new deliveries included.
func inboxClaimCostIsFlatInBacklog(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	// claimCost seeds a backlog and answers the median time of a claim as
	// the inbox loop makes them: take up to two heads, finish them, again.
	claimCost := func(backlog int, thread func(i int) string) time.Duration {
		s := newStore(t)
		items := make([]*store.SlackInboxAddParams, backlog)
		for i := range items {
			items[i] = &store.SlackInboxAddParams{Key: fmt.Sprint("Ev", i), Kind: store.SlackKindEvent, Body: []byte(`{}`), Thread: thread(i)}
		}
		_, err := s.SlackInboxAdd(ctx, items)
		require.NoError(t, err)
		now := time.Now()
		p := &store.SlackClaimParams{Holder: "r1", Now: now, Until: now.Add(time.Minute), Limit: 2}
		var took []time.Duration
		for range 21 {
			t0 := time.Now()
			got, err := s.SlackInboxClaim(ctx, p)
			took = append(took, time.Since(t0))
			require.NoError(t, err)
			require.NotEmpty(t, got)
			for _, it := range got {
				require.NoError(t, s.SlackInboxDone(ctx, it.ID, ""))
			}
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	for name, thread := range map[string]func(int) string{
		"a thread each": func(i int) string { return fmt.Sprint("C1:", i) },
		"one thread":    func(int) string { return "C1:1" },
	} {
		small, big := claimCost(200, thread), claimCost(20_000, thread)
		t.Logf("%s: claim %v with 200 waiting, %v with 20,000", name, small, big)
		require.Less(t, big, 5*small+time.Millisecond, "%s: a 100× backlog makes each claim %.0f× slower", name, float64(big)/float64(small))
	}
}
