// Package workflow compiles workflow memos (SPEC §4.1) into manifests.
//
// A workflow is authored as ordinary markdown so that stewards can read and
// edit it in the memo library; the compiler is the only place that gives that
// prose operational meaning. It walks goldmark's AST rather than matching the
// raw text so that what runs is exactly what a markdown renderer shows the
// author, and it reports every problem at once, each with a line number,
// because authors fix workflows in an editor, not by trial and error.
//
// The manifest is recompiled from the memo's current content on every run, so
// Compile is cheap, pure and safe on arbitrary input.
package workflow

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Step kinds, in the order a run usually meets them.
const (
	KindContext = "context"
	KindProcess = "process"
	KindGuard   = "guard"
	KindOutput  = "output"
)

// Load classes of the Load Contract.
const (
	LoadGate    = "gate"
	LoadHook    = "hook"
	LoadTrigger = "trigger"
	LoadSearch  = "search"
	LoadThread  = "thread"
	LoadEdges   = "edges"
)

// Policy and Trigger values. They are normalised to lower case so that
// callers can compare with these constants regardless of how they were typed.
const (
	StatusLive   = "live"
	StatusPaused = "paused"
	StatusDraft  = "draft"

	ApprovalAuto = "auto"
	ApprovalHold = "hold"

	DestinationMemo  = "memo"
	DestinationReply = "reply"

	ModelTemplate = "template"

	OnTimeoutReject  = "reject"
	OnTimeoutApprove = "approve"
)

// Manifest is the typed form of one workflow memo. Runs store it verbatim so
// that an edit to the memo mid-run cannot change what a resumed run does.
type Manifest struct {
	Title    string    `json:"title"`
	Command  string    `json:"command"`
	Invoke   string    `json:"invoke"`
	Schedule *Schedule `json:"schedule,omitempty"`
	Status   string    `json:"status"`
	Summary  string    `json:"summary"`
	Loads    []Load    `json:"loads"`
	Steps    []Step    `json:"steps"`
	Policy   Policy    `json:"policy"`
}

// Load is one line of the Load Contract; Line lets the runner point a load
// failure back at the clause the author wrote.
type Load struct {
	Class string `json:"class"`
	Value string `json:"value"`
	Line  int    `json:"line"`
}

// Step is one numbered step. Prompt and Guard are only ever set on Process
// and Guard steps respectively; the compiler refuses them elsewhere.
type Step struct {
	Kind   string     `json:"kind"`
	Text   string     `json:"text"`
	Prompt string     `json:"prompt,omitempty"`
	Guard  *GuardSpec `json:"guard,omitempty"`
	Line   int        `json:"line"`
}

// Replies says whether the workflow answers in the conversation it was run
// in (destination reply), which a surface needs to know before running it:
// there must be a conversation to answer in. A nil manifest (a memo that
// does not compile) replies nowhere.
func (m *Manifest) Replies() bool { return m != nil && m.Policy.Destination == DestinationReply }

// Policy holds the run-time knobs. Zero durations mean "no limit" so that a
// manifest decoded from older JSON without those keys keeps its meaning.
type Policy struct {
	Approval     string        `json:"approval"`
	Destination  string        `json:"destination"`
	Model        string        `json:"model"`
	GateLabel    string        `json:"gateLabel"`
	Timeout      time.Duration `json:"timeout"`
	Retries      int           `json:"retries"`
	SelfApproval bool          `json:"selfApproval"`
	Approvals    int           `json:"approvals"`
	HoldTimeout  time.Duration `json:"holdTimeout"`
	OnTimeout    string        `json:"onTimeout"`
	TokenBudget  int64         `json:"tokenBudget,omitempty"`
	// RemindAfter is the interval of an open hold's reminders (SPEC §4.3:
	// at most three, mentioning the stewards who may decide); 0: none.
	RemindAfter time.Duration `json:"remindAfter"`
}

// DefaultPolicy is what a workflow gets for every Policy field it omits.
// It is the cautious choice where caution is cheap (self approval refused,
// an expired hold rejected) and the convenient one elsewhere.
func DefaultPolicy() Policy {
	return Policy{
		Approval:    ApprovalAuto,
		Destination: DestinationMemo,
		Retries:     2,
		Approvals:   1,
		OnTimeout:   OnTimeoutReject,
	}
}

// Error is one compile problem. Line is always >= 1 so that consoles can link
// to it without special-casing.
type Error struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

func (e Error) Error() string { return "line " + strconv.Itoa(e.Line) + ": " + e.Message }

// Errors is every problem found in one compile, sorted by line so that an
// author can work through them top to bottom.
type Errors []Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Err returns es as an error, or a true nil when there are none; returning a
// nil Errors through an error interface would otherwise be non-nil.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
}

// Options carries what the compiler cannot know on its own.
type Options struct {
	// MemoExists reports whether a memo with this title or id exists. Gate and
	// Hook memos are guaranteed loads, so a dangling name is caught at compile
	// time rather than at the first run. Nil skips the check (e.g. previews).
	MemoExists func(name string) bool
}

// ContextMemo is a memo loaded for a run, as a prompt template sees it.
type ContextMemo struct {
	Class string
	Title string
	Body  string
}

// ThreadMessage is one message of the originating session's conversation
// (the Thread load class): who said it, what, and when.
type ThreadMessage struct {
	Speaker string    `json:"speaker"`
	Text    string    `json:"text"`
	TS      time.Time `json:"ts"`
}

// PromptData is the dot of every prompt template. The compiler checks that
// prompts only name these fields, so renaming one is a breaking change for
// every workflow memo in every library.
type PromptData struct {
	Payload  map[string]any
	Context  []ContextMemo
	Thread   []ThreadMessage
	Session  map[string]any
	Workflow *Manifest
	// Edges is the edges-of-understanding report an Edges load asked for
	// (nil without one).
	Edges *Edges
}

// Edges is the edges-of-understanding report (SPEC §10) as a prompt sees
// it: what the system ran into but did not resolve over Window, each kind
// with its count and latest examples, most frequent first.
type Edges struct {
	Window string
	Since  time.Time
	Total  int64
	Kinds  []EdgeKind
}

// EdgeKind is one kind of edge: Label says what it is in a sentence.
type EdgeKind struct {
	Kind   string
	Source string
	Label  string
	Count  int64
	Latest []EdgeExample
}

// EdgeExample is one occurrence; Ref names the record to open (a run,
// hold, session or workflow id, or a Slack delivery's key) and Link its
// console path, when it has one.
type EdgeExample struct {
	At      time.Time
	Ref     string
	Link    string
	Command string
	By      string
	Message string
}
