package bridge_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// readCounter counts the bridge's reads of what a run's transcript events
// are about: the run's item, hold and memo, and the run itself.
type readCounter struct {
	store.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *readCounter) count(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[what]++
}

func (c *readCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *readCounter) QueueItemGetByID(ctx context.Context, id string) (*store.QueueItem, error) {
	c.count("item")
	return c.Store.QueueItemGetByID(ctx, id)
}

func (c *readCounter) HoldGetByID(ctx context.Context, id string) (*store.Hold, error) {
	c.count("hold")
	return c.Store.HoldGetByID(ctx, id)
}

func (c *readCounter) MemoGetByID(ctx context.Context, id string) (*store.Memo, error) {
	c.count("memo")
	return c.Store.MemoGetByID(ctx, id)
}

func (c *readCounter) RunGetByID(ctx context.Context, id string) (*store.Run, error) {
	c.count("run")
	return c.Store.RunGetByID(ctx, id)
}

// TestMirrorReadsNothingBack: a held run from a Slack mention, approved
// and dispatched as a memo, is mirrored from its transcript events alone —
// the acknowledgement, the card, the decided card, the requester's line and
// the memo — with no read of its item, hold, memo or run (the issue counted
// four such reads per run). The decision goes straight to the engine, so
// every counted read would be the mirror's.
func TestMirrorReadsNothingBack(t *testing.T) {
	t.Parallel()
	rc := &readCounter{n: map[string]int{}}
	tb := setup(t, setupOpts{real: true, bridgeStore: func(s store.Store) store.Store { rc.Store = s; return rc },
		cfg: func(c *bridge.Config) { c.HoldsChannel = "CHOLDS" }})

	root := tb.ts()
	tb.event(t, "EvReads1", mention("CRB", "U1", root, "", "draft-memo Otters\nOtters hold hands while they sleep."))
	card, holdID := tb.holdCard(t, "CRB", root)
	_, err := tb.eng.Decide(tb.ctx, engine.DecideParams{HoldID: holdID, Decision: "approve",
		Decider: engine.Decider{SlackUserID: "USTEWARD", Via: "slack"}})
	require.NoError(t, err)
	memo := tb.waitPost(t, "CRB", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Memo dispatched") })
	tb.idle(t)

	require.Empty(t, rc.counts(), "the mirror read back what its events should carry")
	posts := tb.posts("CRB", root)
	require.Contains(t, text(posts[0]), "Queued `draft-memo`")
	require.Contains(t, text(card), "Draft memo", "the card names the workflow")
	require.Contains(t, text(card), "<@U1>", "the card names who asked")
	ups := tb.updates("CRB", card.TS)
	require.Len(t, ups, 1)
	require.Contains(t, text(ups[0]), "*Published:*")
	require.Contains(t, text(ups[0]), "Otters hold hands")
	require.NotEmpty(t, tb.posts("CHOLDS", ""), "the holds channel has its copy")
	require.NotNil(t, memo)
	last := tb.waitPost(t, "CRB", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Otters hold hands") && c.TS != card.TS })
	require.NotNil(t, last)

	// A line written before the events carried the hold (an upgrade's
	// backlog) still reads: the mirror completes it from the store, once.
	told := func() []fakeslack.Call {
		var out []fakeslack.Call
		for _, c := range tb.posts("CRB", root) {
			if strings.HasPrefix(c.Form["text"], "<@U1>, your request *") {
				out = append(out, c)
			}
		}
		return out
	}
	require.Len(t, told(), 1)
	ses, err := tb.store.SessionGetByTag(tb.ctx, "slack:CRB:"+root)
	require.NoError(t, err)
	h, err := tb.store.HoldGetByID(tb.ctx, holdID) // the test's own read, not the bridge's
	require.NoError(t, err)
	tb.appendEvent(t, ses.ID, "hold_decided", map[string]any{"holdId": holdID, "runId": h.RunID,
		"status": "approved", "decidedBy": "slack:USTEWARD", "decidedVia": "slack", "comment": ""})
	tb.eventually(t, func() bool { return len(told()) == 2 }, 10*time.Second, "the old line tells the requester too")
	before := func(c fakeslack.Call) string { s, _, _ := strings.Cut(c.Form["text"], " at <!date"); return s }
	require.Equal(t, before(told()[0]), before(told()[1]), "as the new line did")
	require.Equal(t, map[string]int{"hold": 1}, rc.counts(), "the old line's one read-back")
}
