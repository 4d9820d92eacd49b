package engine

import (
	"context"
	"fmt"

	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
)

// Token budget (SPEC §10): a run whose model calls have used more than the
// workflow's Token budget is held before its next step, through the same
// hold machinery as an output review: a steward's approval lets it go on
// (once: it is not held for its budget again), a rejection cancels it, and
// hold timeouts, cards, the console and the audit work as for any hold. The
// budget is the workflow's cost policy, so a session's posture (which says
// how much output review a session wants) does not waive it.

// budgetHoldID is the id of a run's Token budget hold: its own, beside the
// run's output review (store.HoldIDForRun), so a run may meet both.
func budgetHoldID(runID string) string { return store.HoldIDForRun(runID) + "-budget" }

// IsBudgetHold reports whether a hold is a run's Token budget hold: its
// approval lets the run go on, and publishes nothing (what it shows is the
// output so far, not the run's output).
func IsBudgetHold(holdID, runID string) bool { return holdID == budgetHoldID(runID) }

// tokensUsed sums the tokens in and out of the run's model calls so far.
func (x *exec) tokensUsed() int64 {
	var n int64
	for _, s := range x.steps {
		n += int64(s.TokensIn + s.TokensOut)
	}
	return n
}

// overBudget reports whether the run has passed its Token budget and no
// steward has let it go on yet.
func (x *exec) overBudget() bool {
	b := x.manifest.Policy.TokenBudget
	return b > 0 && !x.state.BudgetPassed && x.tokensUsed() > b
}

// budgetDecided applies a decision on the run's budget hold: the run goes
// on past its budget (with the steward's edit of the output so far, if they
// made one).
func (x *exec) budgetDecided() {
	if x.run.Decision != "approved" || x.run.HoldID != budgetHoldID(x.run.ID) || x.state.BudgetPassed {
		return
	}
	x.state.BudgetPassed = true
	if x.run.DecidedOutput != nil {
		x.state.Output = *x.run.DecidedOutput
	}
}

// holdForBudget holds the run before step i; the gate label names the
// budget and what the run used.
func (x *exec) holdForBudget(ctx context.Context, i int) (*store.Run, error) {
	used := x.tokensUsed()
	x.span.SetAttributes(tracing.TokensUsed.Int64(used))
	return x.hold(ctx, i, budgetHoldID(x.run.ID),
		fmt.Sprintf("Token budget %d passed (%d used)", x.manifest.Policy.TokenBudget, used))
}
