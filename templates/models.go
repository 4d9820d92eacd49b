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
	DoneReason   string
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
	Context      string // pretty JSON, empty when {}
	RequestCount int64
	Created      Time
	LastActive   Time
	CanMessage   bool
	MessageHint  string // why there is no message box
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
	Command     string
	Workflow    string
	GateLabel   string
	Requester   string
	Status      string
	Age         Time
	PreviewHTML string
	PreviewText string // the raw output, prefilled into the edit box
	Approvals   string // "1 of 2" when more than one approval is needed
	DecidedBy   string
	DecidedVia  string
	DecidedAt   Time
	Comment     string
	SessionURL  templ.SafeURL
	CanDecide   bool
	DecideURL   string
	WhyNot      string // shown to stewards who may not decide this one
}

// AuditRow is one decision attempt.
type AuditRow struct {
	When     Time
	Who      string
	Via      string
	Decision string
	Outcome  string
	Detail   string
}

// HoldsView is the holds queue and history.
type HoldsView struct {
	Page    Page
	OpenSig string // changes when the open holds change
	Open    []HoldRow
	Decided []HoldRow
}

// HoldView is one hold.
type HoldView struct {
	Page  Page
	Hold  HoldRow
	Audit []AuditRow
	Error string
}

// RunRow is a run in the runs list.
type RunRow struct {
	ID        string
	URL       templ.SafeURL
	Command   string
	Status    string
	ErrorKind string
	Started   Time
	Duration  string
	Session   *Link
}

// RunsView is the runs list with its status filter.
type RunsView struct {
	Page     Page
	Statuses []OriginToggle // reused: one link per status
	Rows     []RunRow
	NextURL  templ.SafeURL
}

// StepView is one step of a run's timeline.
type StepView struct {
	N         int
	Kind      string
	Text      string
	Status    string
	Meta      string // "12:00:01.250 · 40 ms · 8 in / 8 out tokens"
	ErrorKind string
	Error     string
}

// GuardView is one guard outcome.
type GuardView struct {
	Check  string
	Passed bool
	Detail string
}

// RunView is one run.
type RunView struct {
	Page             Page
	ID               string
	Command          string
	Status           string
	Terminal         bool
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
	Steps            []StepView
	Guards           []GuardView
	Hold             *HoldRow
	Dispatch         []Link
	Manifest         string // pretty JSON
	Audit            []AuditRow
	PollURL          string // set while the run is not settled
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
	Page        Page
	Command     string
	Title       string
	MemoURL     templ.SafeURL
	Summary     string
	Invoke      string
	Status      string
	Errors      []SourceLine // only the lines with errors, for the summary
	Source      []SourceLine
	CanAdmin    bool
	CanRun      bool
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
	Rows     []MemoRow
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
}

// UserRow is a console user.
type UserRow struct {
	ID          string
	Username    string
	Role        string
	SlackUserID string
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
