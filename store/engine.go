package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Queue item statuses (SPEC §4.2).
const (
	ItemPending = "pending"
	ItemClaimed = "claimed"
	ItemDone    = "done"
	ItemFailed  = "failed"
)

// Run statuses (SPEC §4.3).
const (
	RunRunning           = "running"
	RunSuspended         = "suspended"
	RunSucceeded         = "succeeded"
	RunFailed            = "failed"
	RunCancelled         = "cancelled"
	RunRecoveryExhausted = "recovery_exhausted"
)

// Hold statuses.
const (
	HoldOpen     = "open"
	HoldApproved = "approved"
	HoldRejected = "rejected"
)

// Outcomes of a hold decision attempt, as kept in the audit log.
const (
	AttemptAccepted = "accepted" // counted (an approval towards N, or the deciding vote)
	AttemptRefused  = "refused"  // the caller may not decide this hold, or not with this edited output
	AttemptConflict = "conflict" // the hold was already decided (or already approved by this steward)
)

// ErrLeaseLost means a run write was fenced off: the run was taken over by
// recovery, settled, or suspended by someone else since this runner acquired
// it. The runner holding the stale lease must drop the run, which is what
// makes "one settled run, one dispatch" hold across crashes and slow workers.
var ErrLeaseLost = errors.New("run lease lost")

// ItemIDForRun is RunIDForItem backwards: the item a run id was derived from.
func ItemIDForRun(runID string) string {
	_, suffix, ok := strings.Cut(runID, "_")
	if !ok {
		suffix = runID
	}
	return "itm_" + suffix
}

// RunIDForItem derives a run's id from its queue item, so a re-claim can
// never make a second run for one item.
func RunIDForItem(itemID string) string {
	_, suffix, ok := strings.Cut(itemID, "_")
	if !ok {
		suffix = itemID
	}
	return "run_" + suffix
}

// HoldIDForRun derives the hold of a run's output review from its id, so
// reopening a hold after a crash is idempotent. (A run may be held before
// that for other gates, such as its Token budget, under ids of their own.)
func HoldIDForRun(runID string) string {
	_, suffix, ok := strings.Cut(runID, "_")
	if !ok {
		suffix = runID
	}
	return "hld_" + suffix
}

// QueueItem is one row of workflow_queue_items.
type QueueItem struct {
	ID             string         `json:"id"`
	OwnerUID       string         `json:"ownerUid"`
	WorkflowMemoID string         `json:"workflowMemoId"`
	Command        string         `json:"command"`
	DedupeKey      string         `json:"dedupeKey"`
	Payload        map[string]any `json:"payload"`
	Status         string         `json:"status"`
	RunID          string         `json:"runId"`
	SessionID      string         `json:"sessionId"`
	// TargetVersion is the contentVersion payload.targetMemoId had at
	// enqueue; dispatch updates the stub only while it still has it.
	TargetVersion int64      `json:"-"`
	TraceContext  string     `json:"-"` // W3C traceparent of the enqueue: every execution of the run joins its trace
	CreatedAt     time.Time  `json:"createdAt"`
	ClaimedAt     *time.Time `json:"claimedAt"`
	SettledAt     *time.Time `json:"settledAt"`
}

// QueueItemInsertParams enqueues an item. When SessionID is empty and
// NewSession is set, that session is created in the same transaction (tagged
// "workflow:<ID>") and the item joins it. An existing (workflow, dedupe key)
// makes the insert a no-op that answers the existing item.
type QueueItemInsertParams struct {
	ID             string
	OwnerUID       string
	WorkflowMemoID string
	Command        string
	DedupeKey      string
	Payload        map[string]any
	SessionID      string
	TargetVersion  int64
	TraceContext   string
	NewSession     *SessionCreateParams
}

// ItemInsertClaim inserts a new item already claimed: the engine had an idle
// worker for it, so the item is stamped claimed and its run created (status
// running, lease 1, RunnerID's, heartbeat Now) with Events appended to its
// session in the enqueue's own transaction, sparing the claim statement a
// pending item would cost. RunID is the engine's and must be
// RunIDForItem(item id), so one item still has at most one run. A repeat of
// (workflow, dedupe key) claims nothing.
type ItemInsertClaim struct {
	RunID    string
	RunnerID string
	Now      time.Time
	Events   []EventAppendParams
}

// RunStep is one step's record on a run.
type RunStep struct {
	Kind       string     `json:"kind"`
	Status     string     `json:"status"` // pending|running|succeeded|failed|skipped
	StartedAt  *time.Time `json:"startedAt"`
	DurationMs int64      `json:"durationMs"`
	TokensIn   int        `json:"tokensIn"`
	TokensOut  int        `json:"tokensOut"`
	Attempts   int        `json:"attempts,omitempty"`
	ErrorKind  string     `json:"errorKind"`
	Error      string     `json:"error"`
}

// Run is a workflow run. Manifest, State and Guards are JSON the engine owns;
// the store keeps them verbatim. TraceContext is its item's; Model and the
// token totals are the usage last written (RunUsage).
type Run struct {
	ID               string          `json:"id"`
	ItemID           string          `json:"itemId"`
	WorkflowMemoID   string          `json:"workflowMemoId"`
	Command          string          `json:"command"`
	SessionID        string          `json:"sessionId"`
	OwnerUID         string          `json:"ownerUid"`
	Payload          map[string]any  `json:"payload"`
	TargetVersion    int64           `json:"-"`
	TraceContext     string          `json:"-"`
	Status           string          `json:"status"`
	Manifest         json.RawMessage `json:"manifest"`
	Steps            []RunStep       `json:"steps"`
	State            json.RawMessage `json:"-"`
	Guards           json.RawMessage `json:"guards"`
	ErrorKind        string          `json:"errorKind"`
	Error            string          `json:"error"`
	HoldID           string          `json:"holdId"`
	Decision         string          `json:"decision"`
	DecidedOutput    *string         `json:"-"`
	DispatchMemoID   string          `json:"dispatchMemoId"`
	Model            string          `json:"model"`
	TokensIn         int64           `json:"tokensIn"`
	TokensOut        int64           `json:"tokensOut"`
	Lease            int64           `json:"-"`
	RunnerID         string          `json:"runnerId"`
	HeartbeatAt      time.Time       `json:"heartbeatAt"`
	RecoveryAttempts int             `json:"recoveryAttempts"`
	CreatedAt        time.Time       `json:"createdAt"`
	UpdatedAt        time.Time       `json:"updatedAt"`
	FinishedAt       *time.Time      `json:"finishedAt"`
}

// Settled reports whether the run reached a final status.
func (r *Run) Settled() bool {
	switch r.Status {
	case RunSucceeded, RunFailed, RunCancelled, RunRecoveryExhausted:
		return true
	}
	return false
}

// QueueItemClaimParams claims the items the engine chose (from
// QueueItemListPending) and creates their runs, each with the events it
// starts with, in one transaction. The claim is a compare-and-set on
// status: an item someone else claimed first is skipped.
type QueueItemClaimParams struct {
	RunnerID string
	Now      time.Time
	Claims   []ItemClaim
}

// QueueItemHead is what choosing an item to claim needs of it.
type QueueItemHead struct {
	ID        string
	Command   string
	DedupeKey string
}

// ItemClaim is one item to claim and its run's first transcript events.
type ItemClaim struct {
	ItemID string
	Events []EventAppendParams
}

// RunAcquireParams takes over runs: approved suspended runs to resume.
type RunAcquireParams struct {
	RunnerID string
	Limit    int
	Now      time.Time
}

// RunLease names a run as it was read: its id at a lease.
type RunLease struct {
	ID    string
	Lease int64
}

// RunExhaust settles a stuck run the engine gave up on.
type RunExhaust struct {
	RunLease
	Outcome RunOutcome
	Events  []EventAppendParams
}

// RunRescueParams applies the engine's verdict on stuck runs (River's
// JobRescueMany): Recover takes runs over for RunnerID (lease and recovery
// count bumped), Exhaust settles them. Each applies only while the run is
// still running at the lease read with a heartbeat older than StaleBefore;
// a run that moved on meanwhile is skipped.
type RunRescueParams struct {
	RunnerID    string
	StaleBefore time.Time
	Now         time.Time
	Recover     []RunLease
	Exhaust     []RunExhaust
}

// RunUsage is what a run's model calls have used so far: the model they
// call and the tokens in and out summed over its steps. Usage listings
// (UsageList) add up what runs record here.
type RunUsage struct {
	Model     string
	TokensIn  int64
	TokensOut int64
}

// RunCheckpointParams records progress of a running run and refreshes its
// heartbeat. Nil fields are left as they are. It is fenced on Lease.
type RunCheckpointParams struct {
	RunID    string
	Lease    int64
	Now      time.Time
	Manifest json.RawMessage
	Steps    []RunStep
	State    json.RawMessage
	Guards   json.RawMessage
	Usage    *RunUsage
	Events   []EventAppendParams
}

// RunSuspendParams checkpoints a run, opens its hold and suspends it.
type RunSuspendParams struct {
	RunCheckpointParams
	Hold *Hold
}

// MoveGuard refuses a dispatch when the source memo changed since enqueue.
type MoveGuard struct {
	MemoID      string
	ContentHash string
	NotesHash   string
}

// DispatchParams is the memo write of a settling run: exactly one of Create
// and Update. A failed compare-and-set or move guard is ErrConflict and
// nothing of the settle is written.
type DispatchParams struct {
	// MemoID is the memo written: a new memo's id (minted by the engine, so
	// the events it records name it) or the updated memo's.
	MemoID    string
	Create    *MemoCreateParams
	Update    *MemoUpdateParams
	MoveGuard *MoveGuard
}

// RunSettleParams ends a run: final status, the item's status, an optional
// memo dispatch and the transcript, in one transaction fenced on Lease.
type RunSettleParams struct {
	RunID      string
	Lease      int64
	Now        time.Time
	Status     string
	ItemStatus string
	ErrorKind  string
	Error      string
	Manifest   json.RawMessage
	Steps      []RunStep
	State      json.RawMessage
	Guards     json.RawMessage
	Usage      *RunUsage
	Dispatch   *DispatchParams
	Events     []EventAppendParams
}

// ListCursor is a keyset position in a run or hold listing: the last row
// shown, by creation time and id (the tie-break), so the next page starts
// strictly past it in the listing's order whatever was inserted meanwhile.
type ListCursor struct {
	CreatedAt time.Time
	ID        string
}

// RunListParams lists runs, newest first; After continues a listing. Every
// filter set must match.
type RunListParams struct {
	Status    string
	SessionID string
	// Command keeps one workflow's runs (its command with the slash).
	Command string
	// Query keeps runs whose title or brief (the item's payload.title and
	// payload.brief) contains it, case-insensitively.
	Query string
	After *ListCursor
	Limit int
}

// RunCountParams counts runs per status under a listing's filters (every
// filter of RunListParams but Status).
type RunCountParams struct {
	Command   string
	SessionID string
	Query     string
	// Cap bounds a count that has to visit the runs one by one (a text
	// filter): it stops after Cap runs and says so (default 1,000).
	Cap int
}

// RunCounts is runs per status; Capped says the count stopped at the cap,
// so the numbers are of the newest matches only.
type RunCounts struct {
	ByStatus map[string]int64
	Capped   bool
}

// RunHourCount is how many runs created in one hour have one status now.
type RunHourCount struct {
	Hour   time.Time
	Status string
	N      int64
}

// HoldApproval is one steward's approval of a hold.
type HoldApproval struct {
	By      string    `json:"by"`
	Key     string    `json:"-"` // the person, so N approvals are N people
	Via     string    `json:"via"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment"`
	// Edited says this approval came with an edited output.
	Edited bool `json:"edited,omitempty"`
}

// Hold is a stewardship hold (SPEC §4.3). Title says what is being decided,
// set when the hold opens (holds opened before titles were kept have none).
// RemindEvery is Policy `Remind after` (0: no reminders); RemindersSent
// counts the reminders sent and RemindAt is when the next is due (nil: none).
type Hold struct {
	ID                string         `json:"id"`
	RunID             string         `json:"runId"`
	ItemID            string         `json:"itemId"`
	SessionID         string         `json:"sessionId"`
	OwnerUID          string         `json:"ownerUid"`
	Command           string         `json:"command"`
	WorkflowName      string         `json:"workflowName"`
	GateLabel         string         `json:"gateLabel"`
	Title             string         `json:"title"`
	Status            string         `json:"status"`
	Preview           string         `json:"preview"`
	Output            string         `json:"output"`
	Approvals         []HoldApproval `json:"approvals"`
	RequiredApprovals int            `json:"requiredApprovals"`
	SelfApproval      bool           `json:"selfApproval"`
	DecidedBy         string         `json:"decidedBy"`
	DecidedVia        string         `json:"decidedVia"`
	DecidedAt         *time.Time     `json:"decidedAt"`
	Comment           string         `json:"comment"`
	EditedOutput      *string        `json:"editedOutput"`
	ExpiresAt         *time.Time     `json:"expiresAt"`
	OnTimeout         string         `json:"onTimeout"`
	RemindEvery       time.Duration  `json:"-"`
	RemindersSent     int            `json:"remindersSent"`
	RemindAt          *time.Time     `json:"remindAt"`
	CreatedAt         time.Time      `json:"createdAt"`
}

// RunOutcome is how a run ends when a decision settles it.
type RunOutcome struct {
	Status     string
	ItemStatus string
	ErrorKind  string
	Error      string
}

// HoldDecideParams writes one decision the engine has made: the hold's new
// state and, when the decision settles the hold, the run's decision (and,
// for a rejection, its outcome), with the transcript events and the audit
// row, in one transaction. It is a compare-and-set on the hold as the
// engine read it: still open with ExpectApprovals approvals, its run still
// suspended; otherwise ErrConflict and nothing is written.
type HoldDecideParams struct {
	HoldID          string
	ExpectApprovals int
	Status          string // open (a partial approval), approved or rejected
	Approvals       []HoldApproval
	DecidedBy       string
	DecidedVia      string
	Comment         string
	EditedOutput    *string
	Now             time.Time
	// RunDecision is recorded on the run when the hold is decided
	// (approved|rejected): the runner resumes runs from it, not the hold.
	RunDecision string
	// Outcome settles the run (a rejection cancels it).
	Outcome *RunOutcome
	Events  []EventAppendParams // appended to the hold's session
	Audit   HoldDecision
}

// HoldDecision is one audited decision attempt.
type HoldDecision struct {
	ID        int64     `json:"id"`
	HoldID    string    `json:"holdId"`
	RunID     string    `json:"runId"`
	Decision  string    `json:"decision"`
	DecidedBy string    `json:"decidedBy"`
	Via       string    `json:"via"`
	Comment   string    `json:"comment"`
	Output    *string   `json:"output"`
	Outcome   string    `json:"outcome"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"createdAt"`
}

// HoldListParams lists holds: open ones oldest first, otherwise newest
// first; After continues a listing. Decided lists approved and rejected
// holds together, newest decision first, and its cursor's CreatedAt is the
// last shown hold's decision time.
type HoldListParams struct {
	Status    string
	SessionID string
	// Command keeps one workflow's holds, OwnerUID one requester's.
	Command  string
	OwnerUID string
	Decided  bool
	After    *ListCursor
	Limit    int
}

// EngineStore persists queue items, runs and holds (SPEC §4).
type EngineStore interface {
	// QueueItemInsert is idempotent on (workflow, dedupe key); the bool says
	// whether a new item was written.
	QueueItemInsert(ctx context.Context, p *QueueItemInsertParams) (*QueueItem, bool, error)
	// QueueItemInsertClaimed is QueueItemInsert with a new item inserted
	// claimed and its run created (see ItemInsertClaim); the run is nil when
	// the item already existed.
	QueueItemInsertClaimed(ctx context.Context, p *QueueItemInsertParams, c *ItemInsertClaim) (*QueueItem, *Run, bool, error)
	QueueItemGetByID(ctx context.Context, id string) (*QueueItem, error)
	// QueueItemListByIDs reads the items of ids that exist, in no order.
	QueueItemListByIDs(ctx context.Context, ids []string) ([]*QueueItem, error)
	// QueueItemCountPending is one indexed count.
	QueueItemCountPending(ctx context.Context) (int64, error)
	QueueItemCountByStatus(ctx context.Context) (map[string]int64, error)
	// QueueItemListPending lists the heads of the pending queue, oldest
	// first (claim order).
	QueueItemListPending(ctx context.Context, limit int) ([]*QueueItemHead, error)
	// QueueItemClaim atomically claims items and creates their runs
	// (status running); see QueueItemClaimParams.
	QueueItemClaim(ctx context.Context, p *QueueItemClaimParams) ([]*Run, error)

	RunGetByID(ctx context.Context, id string) (*Run, error)
	RunList(ctx context.Context, p *RunListParams) ([]*Run, error)
	RunCountByStatus(ctx context.Context) (map[string]int64, error)
	// RunCountsByStatus counts runs per status under p's filters; without a
	// text filter it reads kept counts, never the runs.
	RunCountsByStatus(ctx context.Context, p *RunCountParams) (*RunCounts, error)
	// RunHourCounts answers, per hour of creation from since's hour on, how
	// many runs have each status (hours and statuses with none are absent).
	RunHourCounts(ctx context.Context, since time.Time) ([]RunHourCount, error)
	// RunListByDispatchMemo lists the runs that dispatched to memoID, newest
	// first (a memo's provenance).
	RunListByDispatchMemo(ctx context.Context, memoID string, limit int) ([]*Run, error)
	RunCheckpoint(ctx context.Context, p *RunCheckpointParams) error
	// RunHeartbeat refreshes a running run's heartbeat (fenced on lease) and
	// answers the cancel request made for it, if any.
	RunHeartbeat(ctx context.Context, runID string, lease int64, now time.Time) (cancel string, err error)
	// RunCancelRequest records reason as a cancel request on running runs
	// that have none yet; whichever process runs them reads it with its
	// next heartbeat.
	RunCancelRequest(ctx context.Context, runIDs []string, reason string) error
	RunSuspend(ctx context.Context, p *RunSuspendParams) (*Hold, error)
	RunSettle(ctx context.Context, p *RunSettleParams) (*Run, error)
	// RunResumeApproved takes over suspended runs whose hold was approved.
	RunResumeApproved(ctx context.Context, p *RunAcquireParams) ([]*Run, error)
	// RunListStuck lists running runs whose heartbeat is older than
	// staleBefore, stalest first.
	RunListStuck(ctx context.Context, staleBefore time.Time, limit int) ([]*Run, error)
	// RunRescueMany applies a verdict on stuck runs; see RunRescueParams.
	RunRescueMany(ctx context.Context, p *RunRescueParams) (recovered, exhausted []*Run, err error)

	HoldGetByID(ctx context.Context, id string) (*Hold, error)
	HoldList(ctx context.Context, p *HoldListParams) ([]*Hold, error)
	// HoldListByRun is a run's holds, oldest first: a run may be held
	// more than once (its Token budget, then its output review).
	HoldListByRun(ctx context.Context, runID string) ([]*Hold, error)
	HoldCountOpen(ctx context.Context) (int64, error)
	// HoldCountOpenMatching counts the open holds matching p's Command,
	// OwnerUID and SessionID.
	HoldCountOpenMatching(ctx context.Context, p *HoldListParams) (int64, error)
	// HoldListExpired lists open holds whose timeout has passed at now.
	HoldListExpired(ctx context.Context, now time.Time, limit int) ([]*Hold, error)
	// HoldDecide applies a decision; see HoldDecideParams.
	HoldDecide(ctx context.Context, p *HoldDecideParams) (*Hold, error)
	// HoldDecisionAppend audits an attempt that changed nothing (refused,
	// or a conflict).
	HoldDecisionAppend(ctx context.Context, d *HoldDecision) error
	HoldDecisionList(ctx context.Context, holdID string) ([]*HoldDecision, error)

	// WorkSubscribe answers a channel that carries a notice after every
	// commit that gave runners something to do: items enqueued (WorkQueued), a hold approved so its run may
	// resume (WorkResumable), cancel requests recorded for running runs or
	// chat turns (WorkCancel, with their ids: RunCancelRequest's run ids,
	// SessionTurnCancel's turn id), a lease released (WorkLeaseFree, so a
	// follower takes over at once). A store shared by several processes
	// (PostgreSQL, §9) notifies every one of them, which is how an enqueue on
	// one replica starts the run on any replica within milliseconds and
	// /terminate on one cancels a model call running on another. A wake-up,
	// not a feed: notices may be dropped for a subscriber that falls behind
	// (the engine's tick and heartbeat catch up). The channel is closed
	// when ctx is done or the store closes.
	WorkSubscribe(ctx context.Context) <-chan WorkNotice
}

// Kinds of WorkNotice.
const (
	WorkQueued    = "queued"
	WorkResumable = "resumable"
	WorkCancel    = "cancel"
	// WorkLeaseFree says a lease was released (LeaseRelease), so a
	// campaigner may take it now; Reason is the lease's name, or empty when
	// the store cannot tell which (notices were lost, as across a
	// reconnect): any lease may be free.
	WorkLeaseFree = "lease_free"
)

// WorkNotice is one WorkSubscribe wake-up.
type WorkNotice struct {
	Kind string `json:"kind"`
	// RunIDs and Reason are a WorkCancel's: the runs asked to cancel and the
	// request's reason (who asked). A WorkLeaseFree's Reason is the lease
	// (empty: any lease).
	RunIDs []string `json:"runIds,omitempty"`
	Reason string   `json:"reason,omitempty"`
}
