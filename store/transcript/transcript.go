// Package transcript is the typed vocabulary of session transcript events:
// one Go type per event type, with the payload keys every producer writes and
// every consumer reads defined once, here. The stored JSON is unchanged: each
// type's JSON tags are the payload keys the transcript has always used, so
// rows written before this package decode.
//
// It is a leaf: it imports only the standard library and store.
package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"

	"github.com/holdfast-bot/holdfast/store"
)

// Event types of the session transcript (SPEC §3). The chat types were
// store's before this package and many suites still name them there (the
// drivers do not: they store any type); the engine's are defined here only.
const (
	TypeUserMessage         = store.EventUserMessage
	TypeAssistantMessage    = store.EventAssistantMessage
	TypeContext             = store.EventContext
	TypeCommand             = store.EventCommand
	TypeActionPlan          = store.EventActionPlan
	TypeToolResult          = store.EventToolResult
	TypePermission          = store.EventPermission
	TypePolicySet           = store.EventPolicySet
	TypeCompactSummary      = store.EventCompactSummary
	TypeRunStarted          = "run_started"
	TypeRunStep             = "run_step"
	TypeHoldOpened          = "hold_opened"
	TypeHoldApprovedPartial = "hold_approved_partial"
	TypeHoldDecided         = "hold_decided"
	TypeHoldReminder        = "hold_reminder"
	TypeRunFinished         = "run_finished"
	TypeMemoDispatched      = "memo_dispatched"
	TypeMessageEdited       = "message_edited"
	TypeMessageDeleted      = "message_deleted"
)

// Event is one typed transcript event.
type Event interface {
	Type() string
	payload() map[string]any
}

// Encode answers the append parameters of ev written by actor (the caller
// sets SessionID where the store needs it).
func Encode(ev Event, actor string) store.EventAppendParams {
	return store.EventAppendParams{Type: ev.Type(), Actor: actor, Payload: ev.payload()}
}

// EncodePtr is Encode for the store calls that take pointers.
func EncodePtr(ev Event, actor string) *store.EventAppendParams {
	p := Encode(ev, actor)
	return &p
}

// Decode answers e's typed value; a type this package does not know is an
// Unknown. A payload whose keys hold values of the wrong JSON type is an
// error, answered with the event those keys left zero: the untyped readers
// read such a value as empty and showed the rest, and a consumer that
// logs the error and goes on reads the transcript as they did.
func Decode(e *store.Event) (Event, error) {
	return DecodePayload(e.Type, e.Payload)
}

// Read is Decode for a consumer, which never drops an event: a wrongly
// shaped payload is logged at debug and read with those fields empty.
func Read(ctx context.Context, log *slog.Logger, e *store.Event) Event {
	ev, err := Decode(e)
	if err != nil {
		log.DebugContext(ctx, "transcript: event read with fields left empty", slog.Int64("event_id", e.ID),
			slog.String("session_id", e.SessionID), slog.String("type", e.Type), slog.Any("error", err))
	}
	return ev
}

// DecodePayload is Decode of a type and payload.
func DecodePayload(typ string, p map[string]any) (Event, error) {
	var ev Event
	switch typ {
	// Messages are most of a transcript and a conversation reads hundreds
	// at a time: they are read from the map directly, not through JSON.
	case TypeUserMessage:
		var r reader
		m := UserMessage{Text: r.str(p, "text"), Said: r.said(p)}
		m.Fields = rest(p, append(saidKeys, "text")...)
		return m, r.err(typ)
	case TypeAssistantMessage:
		var r reader
		m := AssistantMessage{Text: r.str(p, "text"), RunID: r.str(p, "runId"), Dispatch: r.str(p, "dispatch"),
			Command: r.str(p, "command"), Error: r.flag(p, "error"), Posted: r.flag(p, "posted"), Said: r.said(p)}
		m.Fields = rest(p, append(saidKeys, "text", "runId", "dispatch", "command", "error", "posted")...)
		return m, r.err(typ)
	case TypeContext:
		return Context{Fields: maps.Clone(p)}, nil
	case TypeCommand:
		ev = &Command{}
	case TypeActionPlan:
		ev = &ActionPlan{}
	case TypeToolResult:
		ev = &ToolResult{}
	case TypePolicySet:
		ev = &PolicySet{}
	case TypeCompactSummary:
		ev = &CompactSummary{}
	case TypeRunStarted:
		ev = &RunStarted{}
	case TypeRunStep:
		ev = &RunStep{}
	case TypeHoldOpened:
		ev = &HoldOpened{}
	case TypeHoldApprovedPartial:
		ev = &HoldApprovedPartial{}
	case TypeHoldDecided:
		ev = &HoldDecided{}
	case TypeHoldReminder:
		ev = &HoldReminder{}
	case TypeRunFinished:
		ev = &RunFinished{}
	case TypeMemoDispatched:
		ev = &MemoDispatched{}
	case TypeMessageEdited:
		ev = &MessageEdited{}
	case TypeMessageDeleted:
		ev = &MessageDeleted{}
	default:
		return Unknown{EventType: typ, Payload: p}, nil
	}
	if err := into(p, ev); err != nil {
		// encoding/json skips a wrongly typed field and fills the rest.
		return deref(ev), fmt.Errorf("transcript: %s: %w", typ, err)
	}
	return deref(ev), nil
}

// deref answers the value a decoded pointer points to, so a consumer
// switches on value types only.
func deref(ev Event) Event {
	switch v := ev.(type) {
	case *Command:
		return *v
	case *ActionPlan:
		return *v
	case *ToolResult:
		return *v
	case *PolicySet:
		return *v
	case *CompactSummary:
		return *v
	case *RunStarted:
		return *v
	case *RunStep:
		return *v
	case *HoldOpened:
		return *v
	case *HoldApprovedPartial:
		return *v
	case *HoldDecided:
		return *v
	case *HoldReminder:
		return *v
	case *RunFinished:
		return *v
	case *MemoDispatched:
		return *v
	case *MessageEdited:
		return *v
	case *MessageDeleted:
		return *v
	}
	return ev
}

// reader reads keys of a payload leniently, as the untyped readers did (a
// wrongly typed value reads as empty), keeping the first error.
type reader struct{ first error }

func (r *reader) wrong(k string, v any, want string) {
	if r.first == nil {
		r.first = fmt.Errorf("%s is a %T, not a %s", k, v, want)
	}
}

func (r *reader) str(p map[string]any, k string) string {
	switch v := p[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		r.wrong(k, v, "string")
		return ""
	}
}

func (r *reader) flag(p map[string]any, k string) bool {
	switch v := p[k].(type) {
	case bool:
		return v
	case nil:
		return false
	default:
		r.wrong(k, v, "bool")
		return false
	}
}

func (r *reader) said(p map[string]any) Said {
	return Said{Speaker: r.str(p, "speaker"), SlackTS: r.str(p, "ts"), Backfilled: r.flag(p, "backfilled")}
}

func (r *reader) err(typ string) error {
	if r.first == nil {
		return nil
	}
	return fmt.Errorf("transcript: %s: %w", typ, r.first)
}

func into(p map[string]any, v any) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func rest(p map[string]any, known ...string) map[string]any {
	out := maps.Clone(p)
	for _, k := range known {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Unknown is an event of a type this package does not define (permission,
// or a type written by a newer version).
type Unknown struct {
	EventType string
	Payload   map[string]any
}

func (u Unknown) Type() string            { return u.EventType }
func (u Unknown) payload() map[string]any { return u.Payload }

// Said is who said a message and, for one from Slack, when: the keys a
// conversation (engine/thread) orders and names messages by.
type Said struct {
	// Speaker is the display name as recorded (a Slack display name, a
	// console username); empty: the reader names the actor.
	Speaker string `json:"speaker,omitempty"`
	// SlackTS is the Slack ts of a message from Slack.
	SlackTS string `json:"ts,omitempty"`
	// Backfilled marks a message recorded by a thread backfill, after
	// messages that were said later.
	Backfilled bool `json:"backfilled,omitempty"`
}

var saidKeys = []string{"speaker", "ts", "backfilled"}

func (s Said) into(p map[string]any) {
	setString(p, "speaker", s.Speaker)
	setString(p, "ts", s.SlackTS)
	if s.Backfilled {
		p["backfilled"] = true
	}
}

// UserMessage is something a person (or another bot) said. Fields holds
// the rest of the payload: Slack's raw text and coordinates, how it was
// sent (a slash command, a shortcut), files.
type UserMessage struct {
	Text string
	Said
	Fields map[string]any
}

func (UserMessage) Type() string { return TypeUserMessage }
func (m UserMessage) payload() map[string]any {
	p := make(map[string]any, len(m.Fields)+4)
	maps.Copy(p, m.Fields)
	m.Said.into(p)
	p["text"] = m.Text
	return p
}

// AssistantMessage is a reply: the model's, a command's answer (Command
// set), a reply-destination run's output (RunID, Dispatch "reply"), or an
// apology for a failed turn (Error). Fields holds the rest (Slack
// coordinates of a backfilled message).
type AssistantMessage struct {
	Text     string `json:"text"`
	RunID    string `json:"runId,omitempty"`
	Dispatch string `json:"dispatch,omitempty"`
	Command  string `json:"command,omitempty"`
	Error    bool   `json:"error,omitempty"`
	// Posted marks the bridge's own answer in a Slack thread, recorded as
	// it is posted there: no surface posts it again.
	Posted bool `json:"posted,omitempty"`
	Said   `json:"-"`
	Fields map[string]any `json:"-"`
}

func (AssistantMessage) Type() string { return TypeAssistantMessage }
func (m AssistantMessage) payload() map[string]any {
	p := make(map[string]any, len(m.Fields)+4)
	maps.Copy(p, m.Fields)
	m.Said.into(p)
	p["text"] = m.Text
	if m.RunID != "" {
		p["runId"] = m.RunID
	}
	if m.Dispatch != "" {
		p["dispatch"] = m.Dispatch
	}
	if m.Command != "" {
		p["command"] = m.Command
	}
	if m.Error {
		p["error"] = true
	}
	if m.Posted {
		p["posted"] = true
	}
	return p
}

// Context records how a session was opened (purpose; openedBy and via).
type Context struct {
	Fields map[string]any
}

func (Context) Type() string              { return TypeContext }
func (c Context) payload() map[string]any { return maps.Clone(c.Fields) }

// Command is a core command someone ran.
type Command struct {
	Command string `json:"command"`
	By      string `json:"by"`
}

func (Command) Type() string { return TypeCommand }
func (c Command) payload() map[string]any {
	return map[string]any{"command": c.Command, "by": c.By}
}

// PlanStep is one step of an action plan.
type PlanStep struct {
	Title       string `json:"title"`
	Description string `json:"description"`
}

// ActionPlan is the steps an agent means to take, shown before it takes
// them.
type ActionPlan struct {
	Steps []PlanStep `json:"steps"`
}

func (ActionPlan) Type() string { return TypeActionPlan }
func (a ActionPlan) payload() map[string]any {
	steps := make([]any, 0, len(a.Steps))
	for _, s := range a.Steps {
		steps = append(steps, map[string]any{"title": s.Title, "description": s.Description})
	}
	return map[string]any{"steps": steps}
}

// PolicySet is a change of the session's posture.
type PolicySet struct {
	Policy string `json:"policy"`
}

func (PolicySet) Type() string              { return TypePolicySet }
func (p PolicySet) payload() map[string]any { return map[string]any{"policy": p.Policy} }

// CompactSummary is /compact's summary of the events before it.
type CompactSummary struct {
	Text           string `json:"text"`
	EventCount     int    `json:"eventCount"`
	ThroughEventID int64  `json:"throughEventId,omitempty"`
}

func (CompactSummary) Type() string { return TypeCompactSummary }
func (c CompactSummary) payload() map[string]any {
	p := map[string]any{"text": c.Text, "eventCount": c.EventCount}
	if c.ThroughEventID != 0 {
		p["throughEventId"] = c.ThroughEventID
	}
	return p
}

// ToolResult is one tool call of a chat turn and its result (SPEC §3).
type ToolResult struct {
	ToolID    string         `json:"tool_id"`
	Operation string         `json:"operation"`
	ToolInput map[string]any `json:"tool_input"`
	Result    map[string]any `json:"result"`
	CallID    string         `json:"call_id,omitempty"`
}

func (ToolResult) Type() string { return TypeToolResult }
func (t ToolResult) payload() map[string]any {
	p := map[string]any{"tool_id": t.ToolID, "operation": t.Operation, "tool_input": t.ToolInput, "result": t.Result}
	if t.CallID != "" {
		p["call_id"] = t.CallID
	}
	return p
}

// RunStarted is a queue item claimed and its run started. DedupeKey is the
// item's, so a surface can tell the items it enqueued itself without
// reading the item back.
type RunStarted struct {
	RunID     string `json:"runId"`
	ItemID    string `json:"itemId"`
	Command   string `json:"command"`
	DedupeKey string `json:"dedupeKey,omitempty"`
}

func (RunStarted) Type() string { return TypeRunStarted }
func (r RunStarted) payload() map[string]any {
	p := map[string]any{"runId": r.RunID, "itemId": r.ItemID, "command": r.Command}
	setString(p, "dedupeKey", r.DedupeKey)
	return p
}

// setString sets an additive key only when it has a value, so an event
// without it is stored as it was before the key existed.
func setString(p map[string]any, k, v string) {
	if v != "" {
		p[k] = v
	}
}

// RunStep is one step of a run finished (Step counts from 1).
type RunStep struct {
	RunID  string `json:"runId"`
	Step   int    `json:"step"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
}

func (RunStep) Type() string { return TypeRunStep }
func (r RunStep) payload() map[string]any {
	return map[string]any{"runId": r.RunID, "step": r.Step, "kind": r.Kind, "status": r.Status}
}

// HoldOpened is a run suspended on a gate. It carries all a card shows, so
// the Slack mirror need not read the hold back; Required is 0 only in rows
// written before Workflow, Owner and Required were (a reader falls back to
// the hold).
type HoldOpened struct {
	HoldID    string `json:"holdId"`
	RunID     string `json:"runId"`
	Command   string `json:"command"`
	GateLabel string `json:"gateLabel"`
	Preview   string `json:"preview"`
	Title     string `json:"title"`
	Workflow  string `json:"workflow,omitempty"`
	Owner     string `json:"owner,omitempty"`
	Required  int    `json:"required,omitempty"`
}

func (HoldOpened) Type() string { return TypeHoldOpened }
func (h HoldOpened) payload() map[string]any {
	p := map[string]any{"holdId": h.HoldID, "runId": h.RunID, "command": h.Command, "gateLabel": h.GateLabel,
		"preview": h.Preview, "title": h.Title}
	setString(p, "workflow", h.Workflow)
	setString(p, "owner", h.Owner)
	if h.Required != 0 {
		p["required"] = h.Required
	}
	return p
}

// Approval is one steward's approval of a hold.
type Approval struct {
	By  string `json:"by"`
	Via string `json:"via"`
}

// HoldApprovedPartial is an approval that leaves its hold open, waiting for
// more stewards.
type HoldApprovedPartial struct {
	HoldID    string     `json:"holdId"`
	RunID     string     `json:"runId"`
	Approvals []Approval `json:"approvals"`
	Required  int        `json:"required"`
}

func (HoldApprovedPartial) Type() string { return TypeHoldApprovedPartial }
func (h HoldApprovedPartial) payload() map[string]any {
	as := make([]any, 0, len(h.Approvals))
	for _, a := range h.Approvals {
		as = append(as, map[string]any{"by": a.By, "via": a.Via})
	}
	return map[string]any{"holdId": h.HoldID, "runId": h.RunID, "approvals": as, "required": h.Required}
}

// HoldDecided is a hold approved or rejected (or expired). Like HoldOpened
// it carries what the decided card shows — the title as decided, the text
// published (Edited: the steward's edit) — and Required is 0 only in rows
// written before those keys were.
type HoldDecided struct {
	HoldID     string `json:"holdId"`
	RunID      string `json:"runId"`
	Status     string `json:"status"`
	DecidedBy  string `json:"decidedBy"`
	DecidedVia string `json:"decidedVia"`
	Comment    string `json:"comment"`
	Title      string `json:"title,omitempty"`
	Command    string `json:"command,omitempty"`
	GateLabel  string `json:"gateLabel,omitempty"`
	Workflow   string `json:"workflow,omitempty"`
	Owner      string `json:"owner,omitempty"`
	Required   int    `json:"required,omitempty"`
	Published  string `json:"published,omitempty"`
	Edited     bool   `json:"edited,omitempty"`
	// Approvers are the stewards whose approvals counted, in order, when
	// the hold needed more than one; EditedBy is who gave the edited
	// output, which need not be the last of them.
	Approvers []string `json:"approvers,omitempty"`
	EditedBy  string   `json:"editedBy,omitempty"`
}

func (HoldDecided) Type() string { return TypeHoldDecided }
func (h HoldDecided) payload() map[string]any {
	p := map[string]any{"holdId": h.HoldID, "runId": h.RunID, "status": h.Status, "decidedBy": h.DecidedBy,
		"decidedVia": h.DecidedVia, "comment": h.Comment}
	setString(p, "title", h.Title)
	setString(p, "command", h.Command)
	setString(p, "gateLabel", h.GateLabel)
	setString(p, "workflow", h.Workflow)
	setString(p, "owner", h.Owner)
	setString(p, "published", h.Published)
	if h.Required != 0 {
		p["required"] = h.Required
	}
	if h.Edited {
		p["edited"] = true
	}
	setString(p, "editedBy", h.EditedBy)
	if len(h.Approvers) > 0 {
		as := make([]any, len(h.Approvers))
		for i, a := range h.Approvers {
			as[i] = a
		}
		p["approvers"] = as
	}
	return p
}

// HoldReminder is the Nth of Of reminders that a hold still waits, naming
// the Slack stewards who may decide it; OpenedAt is RFC 3339.
type HoldReminder struct {
	HoldID    string   `json:"holdId"`
	RunID     string   `json:"runId"`
	Title     string   `json:"title"`
	Command   string   `json:"command"`
	GateLabel string   `json:"gateLabel"`
	N         int      `json:"n"`
	Of        int      `json:"of"`
	Stewards  []string `json:"stewards"`
	OpenedAt  string   `json:"openedAt"`
}

func (HoldReminder) Type() string { return TypeHoldReminder }
func (h HoldReminder) payload() map[string]any {
	return map[string]any{"holdId": h.HoldID, "runId": h.RunID, "title": h.Title, "command": h.Command,
		"gateLabel": h.GateLabel, "n": h.N, "of": h.Of, "stewards": h.Stewards, "openedAt": h.OpenedAt}
}

// RunFinished is a run settled: succeeded, failed, cancelled or
// recovery_exhausted.
type RunFinished struct {
	RunID     string `json:"runId"`
	Status    string `json:"status"`
	ErrorKind string `json:"errorKind"`
	Error     string `json:"error"`
}

func (RunFinished) Type() string { return TypeRunFinished }
func (r RunFinished) payload() map[string]any {
	return map[string]any{"runId": r.RunID, "status": r.Status, "errorKind": r.ErrorKind, "error": r.Error}
}

// MemoDispatched is a run's output published as a memo. Body is the text
// published, so a surface posting the memo need not read it back; it is
// empty in rows written before it was.
type MemoDispatched struct {
	RunID  string `json:"runId"`
	MemoID string `json:"memoId"`
	Title  string `json:"title"`
	Body   string `json:"body,omitempty"`
}

func (MemoDispatched) Type() string { return TypeMemoDispatched }
func (m MemoDispatched) payload() map[string]any {
	p := map[string]any{"runId": m.RunID, "memoId": m.MemoID, "title": m.Title}
	setString(p, "body", m.Body)
	return p
}

// MessageEdited is a message said earlier (named by its Slack ts) as its
// speaker has since rewritten it. The transcript is append-only, so the
// first text stays where it was said; a conversation (engine/thread) reads
// the latest edit in its place.
type MessageEdited struct {
	SlackTS string `json:"ts"`
	Text    string `json:"text"`
	Raw     string `json:"raw,omitempty"` // Slack's own text
}

func (MessageEdited) Type() string { return TypeMessageEdited }
func (m MessageEdited) payload() map[string]any {
	p := map[string]any{"ts": m.SlackTS, "text": m.Text}
	setString(p, "raw", m.Raw)
	return p
}

// MessageDeleted is a message said earlier (named by its Slack ts) that
// its speaker deleted: a conversation leaves it out from then on.
type MessageDeleted struct {
	SlackTS string `json:"ts"`
}

func (MessageDeleted) Type() string              { return TypeMessageDeleted }
func (m MessageDeleted) payload() map[string]any { return map[string]any{"ts": m.SlackTS} }

// RunOf answers the run an event is about, or "" for an event about none.
func RunOf(ev Event) string {
	switch v := ev.(type) {
	case RunStarted:
		return v.RunID
	case RunStep:
		return v.RunID
	case HoldOpened:
		return v.RunID
	case HoldApprovedPartial:
		return v.RunID
	case HoldDecided:
		return v.RunID
	case HoldReminder:
		return v.RunID
	case RunFinished:
		return v.RunID
	case MemoDispatched:
		return v.RunID
	case AssistantMessage:
		return v.RunID
	}
	return ""
}

// MessageOf reads the text of a user or assistant message and who said it
// (ok false for any other event), without the rest of its payload: a
// conversation reads hundreds at a time. Its error is Decode's.
func MessageOf(e *store.Event) (text string, said Said, ok bool, err error) {
	if e.Type != TypeUserMessage && e.Type != TypeAssistantMessage {
		return "", said, false, nil
	}
	var r reader
	text, said = r.str(e.Payload, "text"), r.said(e.Payload)
	if e.Type == TypeAssistantMessage {
		r.str(e.Payload, "runId")
		r.str(e.Payload, "dispatch")
		r.str(e.Payload, "command")
		r.flag(e.Payload, "error")
	}
	return text, said, true, r.err(e.Type)
}
