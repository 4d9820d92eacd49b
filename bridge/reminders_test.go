package bridge_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
)

// clock is a movable test clock for the engine.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// startStop runs a bridge on tb's store until the returned stop is called
// (a process, for restart tests).
func startStop(tb *testBundle, cfg bridge.Config) (stop func()) {
	b := bridge.New(cfg, tb.store, apiFor(tb), tb.engine, tb.sessions, discard())
	ctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Start(ctx) }()
	return func() { cancel(); <-done }
}

// TestRemindersInSlack: with Remind after, an open hold is reminded in its
// thread and the holds channel, mentioning the stewards who may decide (not
// the requester), at most three times; a restart of the bridge neither
// loses nor repeats one, and a decision stops them.
func TestRemindersInSlack(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	cfg := bridge.Config{SigningSecret: secret, BaseURL: "http://holdfast.test", Tick: 50 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, InboxRetry: 10 * time.Millisecond,
		Stewards: []string{"USTEWARD", "USTEWARD2"}, HoldsChannel: "CHOLDS"}
	tb := setup(t, setupOpts{real: true, noStart: true, engineCfg: func(c *engine.Config) { c.Now = clk.Now }})
	wf := strings.Replace(strings.Replace(draftMemo(t), "`/draft-memo`", "`/nudged`", 1),
		"- **Approval** `hold`", "- **Approval** `hold`\n- **Remind after** `4h`", 1)
	_, _, err := tb.lib.ImportWorkflow(tb.ctx, "Nudged draft", wf)
	require.NoError(t, err)

	stop := startStop(tb, cfg)
	root := tb.ts()
	tb.event(t, "EvN1", mention("CN", "U1", root, "", "nudged Tides\nTides turn."))
	card, holdID := tb.holdCard(t, "CN", root)
	reminders := func(channel, thread string) []fakeslack.Call {
		var out []fakeslack.Call
		for _, c := range tb.posts(channel, thread) {
			if strings.Contains(c.Form["text"], ":alarm_clock: Reminder") {
				out = append(out, c)
			}
		}
		return out
	}
	remind := func() {
		clk.Advance(4*time.Hour + time.Minute)
		_, err := tb.eng.RunPass(tb.ctx)
		require.NoError(t, err)
	}

	remind()
	first := tb.waitPost(t, "CN", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Reminder 1 of 3") })
	require.Contains(t, first.Form["text"], "*Tides*")
	require.Contains(t, first.Form["text"], "<@USTEWARD> <@USTEWARD2>, you may decide it")
	require.NotContains(t, first.Form["text"], "<@U1>", "the requester may not approve their own run")
	require.Contains(t, first.Form["text"], "http://holdfast.test/holds/"+holdID)
	inHolds := tb.waitPost(t, "CHOLDS", "", func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Reminder 1 of 3") })
	require.Contains(t, inHolds.Form["text"], fakeslack.Permalink("CN", root))

	// The second reminder is written while no bridge runs; the next one
	// posts it, once; the one after that repeats nothing.
	tb.quiet(t)
	stop()
	remind()
	stop = startStop(tb, cfg)
	tb.waitPost(t, "CN", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Reminder 2 of 3") })
	tb.quiet(t)
	stop()
	stop = startStop(tb, cfg)
	defer func() { stop() }()
	tb.quiet(t)
	require.Len(t, reminders("CN", root), 2, "a restart repeats no reminder")

	remind()
	tb.waitPost(t, "CN", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Reminder 3 of 3") })
	remind()
	tb.quiet(t)
	require.Len(t, reminders("CN", root), 3, "at most three")
	require.Len(t, reminders("CHOLDS", ""), 3)

	// A hold decided before its reminder is due is not reminded.
	root2 := tb.ts()
	tb.event(t, "EvN2", mention("CN", "U1", root2, "", "nudged Currents\nCurrents flow."))
	_, hold2 := tb.holdCard(t, "CN", root2)
	tb.click(t, "USTEWARD", "hold_reject", hold2, "CN", card.TS, root2)
	tb.waitPost(t, "CN", root2, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Rejected*") })
	remind()
	tb.quiet(t)
	require.Empty(t, reminders("CN", root2), "a decision stops the reminders")
}
