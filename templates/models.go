// Package templates holds the console's templ components and the view
// models they display. Handlers (console/web) do every lookup, permission
// check and formatting; components only show what a view model carries.
package templates

import "github.com/a-h/templ"

// Page is what the layout shows around every page.
type Page struct {
	Title string
	// Nav names the active section: sessions, holds, runs, workflows, memos, users.
	Nav string
	// Viewer is the signed-in user; nil on the sign-in page.
	Viewer *Viewer
	// CSRF is the session's token, put into every form and a meta tag for htmx.
	CSRF      string
	Flash     string
	FlashErr  bool
	OpenHolds int
}

// Viewer is the signed-in user as the layout shows them.
type Viewer struct {
	Name      string
	Role      string
	CanDecide bool
	CanAct    bool // steward or admin: session actions
	IsAdmin   bool
}

// Link is a labelled URL.
type Link struct {
	Label string
	URL   templ.SafeURL
}

// Time is a timestamp shown relatively with the exact value on hover.
type Time struct {
	Ago string // "3m ago"
	ISO string // RFC 3339
}

// LoginView is the sign-in form.
type LoginView struct {
	Page     Page
	Username string
	Error    string
	Next     string
}

// ErrorView is a 403/404/500 page.
type ErrorView struct {
	Page    Page
	Status  int
	Heading string
	Message string
}

// OriginToggle is one origin filter switch; URL flips just this origin.
type OriginToggle struct {
	Origin string
	Label  string
	On     bool
	URL    templ.SafeURL
}

// SessionRow is one line of the sessions list.
type SessionRow struct {
	ID           string
	URL          templ.SafeURL
	Title        string
	Tag          string
	Origin       string
	Badge        string // "Slack" for a Slack channel session, else the origin
	Capabilities []string
	Status       string
	Archived     bool
	Events       int64
	EventsText   string // "1 event", "12 events"
	LastActive   Time
}

// SessionsView is the sessions list.
type SessionsView struct {
	Page            Page
	Toggles         []OriginToggle
	Origins         string // comma-joined, for the filter form
	Query           string
	IncludeArchived bool
	ArchivedURL     templ.SafeURL // flips include-archived
	Rows            []SessionRow
	NextURL         templ.SafeURL // empty on the last page
	FirstURL        templ.SafeURL // set when on a later page
	Filtered        bool          // a non-default filter is active (changes the empty state)
}

// SessionView is one session: summary, actions, transcript.
type SessionView struct {
	Page         Page
	Usage        string // tokens its runs used, in a phrase
	ID           string
	Title        string
	Status       string
	DoneReason   string
	Origin       string
	Badge        string
	Tags         []string
	Capabilities []string
	Policy       string
	Policies     []string
	Archived     bool
	ForkedFrom   *Link
	ActiveRun    *Link
	OpenHolds    []Link
	SlackURL     templ.SafeURL // the Slack thread, when known
	RunsURL      templ.SafeURL // this session's runs
	Context      string        // pretty JSON, empty when {}
	RequestCount int64
	Created      Time
	LastActive   Time
	CanMessage   bool
	MessageHint  string // where a message goes, or why there is no message box
	Events       []EventView
	Older        string // "Showing the latest 300 of 1,204 events", when cut
	Poll         PollView
}

// PollView is the transcript's live tail: it polls for events after After
// and replaces itself with them and a new PollView.
type PollView struct {
	URL string
}

// EventView is one transcript event, pre-digested for display.
type EventView struct {
	ID      int64
	Type    string
	Kind    string // message | system | hold
	Actor   string
	When    Time
	TS      string // RFC 3339 µs, for fork-at
	Text    string // plain text (messages, command, errors)
	HTML    string // rendered markdown (assistant messages, summaries), already safe
	Links   []Link
	Hold    *HoldCard
	Fields  [][2]string // extra key/values worth showing
	CanFork bool
	ForkURL string
	CSRF    string
}

// HoldCard is a hold shown inside a transcript.
type HoldCard struct {
	URL       templ.SafeURL
	Title     string // what is being decided (engine.HoldTitle)
	Command   string
	GateLabel string
	Status    string
	Preview   string // rendered markdown
	DecidedBy string
	Via       string
	Comment   string
}

// HoldRow is a hold in the holds list and on its own page.
type HoldRow struct {
	ID          string
	URL         templ.SafeURL
	RunURL      templ.SafeURL
	RunID       string
	Title       string // what is being decided (engine.HoldTitle)
	Command     string
	Workflow    string
	GateLabel   string
	Requester   string
	Status      string
	Age         Time
	AgeText     string // "waiting 3h"
	PreviewHTML string
	PreviewText string // the raw output, prefilled into the edit box
	// DraftComment and DraftOutput are the viewer's own refused attempt's
	// text, given back to the form in place of the blank comment and the
	// run's output.
	DraftComment string
	DraftOutput  string
	Approvals    string // "1 of 2" when more than one approval is needed
	DecidedBy    string
	DecidedVia   string
	DecidedAt    Time
	Comment      string
	Edited       bool // approved with an edited output
	SessionURL   templ.SafeURL
	SlackURL     templ.SafeURL // the Slack thread, when known
	// CanDecide shows the decision form (the viewer is a steward and the
	// hold is open); CanApprove enables its Approve, else ApproveWhy says
	// why not. WhyNot explains a missing form (a viewer).
	CanDecide  bool
	CanApprove bool
	ApproveWhy string
	DecideURL  string
	WhyNot     string
	// Sig changes when the card would show something new (live refresh).
	Sig string
}

// AuditRow is one decision attempt.
type AuditRow struct {
	ID        int64
	Highlight bool // the attempt the page was sent to show
	When      Time
	Who       string
	Via       string
	Decision  string
	Outcome   string
	Reason    string // why it was refused or not recorded
	Detail    string
}

// Option is one choice of a filter's select.
type Option struct {
	Value    string
	Label    string
	Selected bool
}

// HoldsView is the holds queue and history.
type HoldsView struct {
	Page       Page
	Workflows  []Option
	Requesters []Option
	Filtered   bool
	ClearURL   templ.SafeURL
	// OpenCount is the open holds matching the filters; Open shows the
	// oldest of them, OpenMore says how many more there are.
	OpenCount int
	Open      []HoldRow
	OpenMore  int
	LiveURL   string // polled for arrivals and decisions
	Decided   []HoldRow
	// DecidedNext pages the history; DecidedFirst returns to its start.
	DecidedNext  templ.SafeURL
	DecidedFirst templ.SafeURL
}

// HoldsLive is one live refresh of the holds queue: cards to add, replace
// and remove, and the counts, as htmx out-of-band swaps.
type HoldsLive struct {
	CSRF      string
	OpenCount int
	NavCount  int
	Add       []HoldRow
	Replace   []HoldRow
	Remove    []string
	Empty     bool
}

// DiffLine is one line of a line diff: Op is "=", "-" or "+".
type DiffLine struct {
	Op   string
	Text string
}

// HoldView is one hold.
type HoldView struct {
	Page  Page
	Hold  HoldRow
	Audit []AuditRow
	Error string
	// Attempt is the decision attempt the page was sent to show (PRG), with
	// its outcome as a sentence.
	Attempt *AttemptNote
	// Diff compares the run's output with the published (edited) text;
	// EditedGuards are the Guard checks of the edited text.
	Diff         []DiffLine
	EditedGuards []GuardView
}

// AttemptNote is a decision attempt's outcome shown on the hold page.
type AttemptNote struct {
	ID      int64
	Text    string
	Refused bool
}

// RunRow is a run in the runs list.
type RunRow struct {
	ID        string
	URL       templ.SafeURL
	Title     string
	Command   string
	Status    string
	ErrorKind string
	Error     string
	Started   Time
	Duration  string
	Session   *Link
}

// StatusCount is one status with its count, linking the filter.
type StatusCount struct {
	Status string
	Label  string
	N      int64
	On     bool
	URL    templ.SafeURL
}

// RunsView is the runs list with its filters.
type RunsView struct {
	Page      Page
	Statuses  []StatusCount
	CountNote string // "counts of the newest 1,000 matches"
	Workflows []Option
	Status    string
	Query     string
	SessionID string
	Session   *Link
	Filtered  bool
	ClearURL  templ.SafeURL
	Rows      []RunRow
	NextURL   templ.SafeURL
	FirstURL  templ.SafeURL
}

// StepView is one step of a run's timeline.
type StepView struct {
	N         int
	Kind      string
	Text      string
	Status    string
	Meta      string // "12:00:01.250 · 8 in / 8 out tokens"
	ErrorKind string
	Error     string
}

// WaterfallRow is one bar of a run's waterfall: a step or the approval
// wait, placed on the run's time axis (Start and Width in 0..1000).
type WaterfallRow struct {
	Label    string
	Kind     string // a step kind, or "wait"
	Status   string
	Start    int
	Width    int
	Duration string
	Step     *StepView // nil for the approval wait
	Note     string
}

// GuardView is one guard outcome.
type GuardView struct {
	Check  string
	Passed bool
	Detail string
}

// RunHold is one hold of a run, with its decision audit.
type RunHold struct {
	Row   HoldRow
	Audit []AuditRow
}

// RunView is one run.
type RunView struct {
	Page             Page
	ID               string
	Title            string
	Command          string
	WorkflowURL      templ.SafeURL
	Status           string
	Terminal         bool
	Lead             string // what happened, in a sentence
	LeadBad          bool
	ErrorKind        string
	Error            string
	Item             string
	Session          *Link
	Started          Time
	Finished         Time
	Duration         string
	RecoveryAttempts int
	Runner           string
	Heartbeat        Time
	Waterfall        []WaterfallRow
	Total            string
	Guards           []GuardView
	Holds            []RunHold // oldest first
	Dispatch         []Link
	Manifest         string // pretty JSON
	PollURL          string // set while the run is not settled
	CanRerun         bool
	CanCancel        bool
	RerunURL         string
	CancelURL        string
	CancelNote       string // what Cancel does to this run
	Queued           bool   // the item is waiting for a runner: no run yet
	Usage            string // tokens the run's model calls used, in a phrase
}

// HomeView is what a steward sees first (SPEC §6).
type HomeView struct {
	Page       Page
	CanDecide  bool
	Decidable  []HoldRow
	MoreHolds  int // open holds beyond those shown (any the viewer may see)
	OpenHolds  int
	RunCounts  []StatusCount
	RunsTotal  int64
	Failures   []RunRow
	Chart      Chart
	ViewerNote string
	Usage      string // tokens used by runs of the last 24 h, in a phrase
}

// Chart is runs per hour by status over the last day, drawn server-side as
// SVG: Bars in viewBox units, and Table, the same numbers as text.
type Chart struct {
	Width, Height int
	Bars          []ChartBar
	Ticks         []ChartTick
	YTicks        []ChartTick
	Legend        []StatusCount
	Summary       string
	Table         []ChartRow
	Statuses      []string
}

// ChartBar is one rectangle of a stacked bar.
type ChartBar struct {
	X, Y, W, H int
	Status     string
	Title      string
}

// ChartTick is an axis label.
type ChartTick struct {
	X, Y   int
	Label  string
	Anchor string // SVG text-anchor: start, middle or end
}

// ChartRow is one hour of the chart as text.
type ChartRow struct {
	Hour   string
	Counts []int64
	Total  int64
}

// WorkflowRow is a workflow in the list.
type WorkflowRow struct {
	Command string
	URL     templ.SafeURL
	Title   string
	Summary string
	Invoke  string
	Status  string
	Errors  int
}

// WorkflowsView is the workflows list.
type WorkflowsView struct {
	Page Page
	Rows []WorkflowRow
}

// SourceLine is one line of a workflow memo with its compile errors.
type SourceLine struct {
	N      int
	Text   string
	Errors []string
}

// WorkflowView is one workflow: trigger, status, source with errors, run-now.
type WorkflowView struct {
	Page     Page
	Usage    string // tokens its runs used over the last 7 days, in a phrase
	Command  string
	Title    string
	MemoURL  templ.SafeURL
	Summary  string
	Invoke   string
	Status   string
	Errors   []SourceLine // only the lines with errors, for the summary
	Source   []SourceLine
	CanAdmin bool
	CanRun   bool
	// Replies: the workflow's destination is reply, so Run now starts a
	// conversation for it instead of enqueueing a bare item.
	Replies     bool
	RunNowURL   string
	StatusURL   string
	Brief       string
	DedupeKey   string
	RunNowError string
	Recent      []RunRow
}

// MemoRow is a memo in the library.
type MemoRow struct {
	ID       string
	URL      templ.SafeURL
	Title    string
	Snippet  string
	MemoType string
	Tags     []string
	Unlisted bool
	Updated  Time
}

// MemosView is the library with search.
type MemosView struct {
	Page     Page
	Query    string
	MemoType string
	// Error is why the query was refused (a filter the grammar rejects).
	Error   string
	Rows    []MemoRow
	PageNo  int
	PrevURL templ.SafeURL
	NextURL templ.SafeURL
}

// MemoView is one memo, rendered.
type MemoView struct {
	Page     Page
	ID       string
	Title    string
	MemoType string
	Tags     []string
	Notes    string
	Unlisted bool
	Version  int64
	Created  Time
	Updated  Time
	HTML     string // goldmark output with raw HTML escaped; safe to embed
	Workflow *Link
	// WorkflowErrors says how the workflow fails to compile, if it does.
	WorkflowErrors string
	Provenance     *Provenance
	CanEdit        bool
	EditURL        templ.SafeURL
}

// Provenance is how a memo came to be: the run that published it, its hold
// and the steward who approved it.
type Provenance struct {
	Run      Link
	Workflow string
	Hold     *Link
	Steward  string
	Via      string
	When     Time
	Edited   bool
	// EditedBy names who edited, when several approved (else "the steward").
	EditedBy string
	Earlier  int // other runs that wrote to this memo
}

// MemoEditView is a memo's edit form; after a lost compare-and-set it also
// shows the version that won (Conflict) beside the caller's text.
type MemoEditView struct {
	Page     Page
	ID       string
	URL      templ.SafeURL
	Action   string
	Title    string
	Body     string
	Notes    string
	Version  int64
	Conflict *MemoConflict
	Error    string
}

// MemoConflict is the current version shown beside a losing edit.
type MemoConflict struct {
	YourBase int64
	Version  int64
	Title    string
	Body     string
	Diff     []DiffLine // current → yours
}

// UserRow is a console user.
type UserRow struct {
	ID          string
	Username    string
	Role        string
	SlackUserID string
	Disabled    bool
	Created     Time
	IsSelf      bool
}

// UsersView is the admin's user list.
type UsersView struct {
	Page  Page
	Rows  []UserRow
	Roles []string
	Error string
	Form  struct{ Username, Role, SlackUserID string }
}
