package web_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/web"
	"github.com/holdfast-bot/holdfast/store"
)

// claimedBetweenReads is a store on which the first read of one run misses,
// as when the page reads the run an instant before the runner's claim
// commits it and reads the item an instant after.
type claimedBetweenReads struct {
	store.Store
	runID  string
	missed atomic.Bool
}

func (s *claimedBetweenReads) RunGetByID(ctx context.Context, id string) (*store.Run, error) {
	if id == s.runID && s.missed.CompareAndSwap(false, true) {
		return nil, store.ErrNotFound
	}
	return s.Store.RunGetByID(ctx, id)
}

// TestRunPageOfARunClaimedMeanwhile: the page of a run claimed between the
// console's read of the run and its read of the item shows the run (the
// re-run redirect lands there at once); it used to answer 404, seen on
// PostgreSQL in TestRunsPageFiltersRerunAndCancel.
func TestRunPageOfARunClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	racy := &claimedBetweenReads{}
	b := setupWith(t, func(d *web.Deps) {
		racy.Store = d.Store
		d.Store = racy
	})
	item, _ := b.heldRun(t, "slack:U9", "Otter census")
	racy.runID = store.RunIDForItem(item.ID)
	status, page := b.signedIn(t, "viewer").get("/runs/" + racy.runID)
	require.True(t, racy.missed.Load(), "the page read the run")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, racy.runID)
}
