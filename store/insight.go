package store

import (
	"context"
	"time"
)

// InsightStore answers questions over what is already recorded: what runs
// spent (usage) and what the system ran into but did not resolve (edges of
// understanding, SPEC §10). Both are reads; neither keeps state of its own
// beyond what its indexes need.
type InsightStore interface {
	// UsageList sums the tokens of runs created at or after p.Since (zero:
	// all time), grouped by p.GroupBy, most tokens first. Only runs whose
	// model calls used tokens count.
	UsageList(ctx context.Context, p *UsageListParams) ([]*Usage, error)
	// EdgeList reports, over runs, holds, decision attempts, workflows,
	// Slack deliveries and chat turns recorded at or after p.Since, each
	// kind of thing left unresolved with its count and its latest
	// examples, newest first. Kinds with nothing to report are left out.
	EdgeList(ctx context.Context, p *EdgeListParams) ([]*Edge, error)
}

// Usage groupings.
const (
	UsageByWorkflow = "workflow" // Key is the workflow's command
	UsageBySession  = "session"  // Key is the session id
	UsageByModel    = "model"    // Key is the model spec ("" for the default)
)

// ValidUsageGroup reports whether g is one of the usage groupings.
func ValidUsageGroup(g string) bool {
	return g == UsageByWorkflow || g == UsageBySession || g == UsageByModel
}

// UsageListParams selects a usage listing. Limit bounds the keys answered
// (default 100, at most 1000).
type UsageListParams struct {
	Since   time.Time
	GroupBy string
	Limit   int
}

// Usage is one key's total.
type Usage struct {
	Key       string `json:"key"`
	Runs      int64  `json:"runs"`
	TokensIn  int64  `json:"tokensIn"`
	TokensOut int64  `json:"tokensOut"`
}

// Edge kinds besides failed runs, which are reported under their error
// kind (guard, model, dispatch_conflict, …, recovery_exhausted).
const (
	EdgeHoldTimeout     = "hold_timeout"     // holds the engine decided because nobody did
	EdgeDecisionRefused = "decision_refused" // decision attempts refused (not a steward, self approval, an edit failing a Guard check)
	EdgeWorkflowBroken  = "workflow_broken"  // workflow memos that do not compile, now
	EdgeSlackUnhandled  = "slack_unhandled"  // Slack deliveries set aside with an error
	EdgeTurnFailed      = "turn_failed"      // chat turns that ended in an error
)

// Edge sources: what an edge's examples link to first.
const (
	EdgeSourceRun      = "run"
	EdgeSourceHold     = "hold"
	EdgeSourceDecision = "decision"
	EdgeSourceWorkflow = "workflow"
	EdgeSourceSlack    = "slack"
	EdgeSourceTurn     = "turn"
)

// EdgeListParams selects an edges report. Latest bounds the examples per
// kind (default 5, at most 50).
type EdgeListParams struct {
	Since  time.Time
	Latest int
}

// Edge is one kind of unresolved thing over the window.
type Edge struct {
	Kind   string         `json:"kind"`
	Source string         `json:"source"`
	Count  int64          `json:"count"`
	Latest []*EdgeExample `json:"latest"`
}

// EdgeExample is one occurrence, with the ids that link it: a run, a hold,
// a session, a workflow memo or, for a Slack delivery, its key.
type EdgeExample struct {
	At             time.Time `json:"at"`
	RunID          string    `json:"runId,omitempty"`
	HoldID         string    `json:"holdId,omitempty"`
	SessionID      string    `json:"sessionId,omitempty"`
	WorkflowMemoID string    `json:"workflowMemoId,omitempty"`
	Command        string    `json:"command,omitempty"`
	Key            string    `json:"key,omitempty"`
	By             string    `json:"by,omitempty"`
	Message        string    `json:"message"`
}
