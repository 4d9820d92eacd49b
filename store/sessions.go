package store

import (
	"encoding/json"
	"time"
)

// Session postures (SPEC §3, seed 001 "policy follows head").
const (
	PolicyManual = "manual"
	PolicyAuto   = "auto"
	PolicyYolo   = "yolo"
)

// Session statuses.
const (
	SessionIdle      = "idle"
	SessionRunning   = "running"
	SessionDone      = "done"
	SessionFailed    = "failed"
	SessionCancelled = "cancelled"
)

// Event types of the session transcript (SPEC §3). The engine's run_* and
// hold_* types are appended by the engine itself.
const (
	EventUserMessage      = "user_message"
	EventAssistantMessage = "assistant_message"
	EventContext          = "context"
	EventCommand          = "command"
	EventActionPlan       = "action_plan"
	EventToolResult       = "tool_result"
	EventPermission       = "permission"
	EventPolicySet        = "policy_set"
	EventCompactSummary   = "compact_summary"
)

// SessionCursor is a keyset position in the listing: rows strictly older
// than (LastActiveAt, ID) in newest-activity-first order come next.
type SessionCursor struct {
	LastActiveAt time.Time
	ID           string
}

// SessionListParams lists non-empty sessions (EventCount > 0), newest
// activity first. Origins must be non-empty; Query matches title or tags
// (case-insensitive substring).
type SessionListParams struct {
	Origins         []string
	IncludeArchived bool
	Query           string
	After           *SessionCursor
	Limit           int
}

// EventListParams reads a transcript in ts order. After is exclusive (zero
// means from the start). Types, when set, keeps only those types. Newest
// returns the newest Limit events instead of the oldest (still ascending).
type EventListParams struct {
	SessionID string
	After     time.Time
	Types     []string
	// Until, when set, keeps events with ts ≤ Until.
	Until  time.Time
	Newest bool
	Limit  int
}

// SessionForkParams copies a session's events with ts ≤ At into a new
// session whose posture is the one in force at At.
type SessionForkParams struct {
	SourceID string
	At       time.Time
	// Policy is the fork's effective posture (the engine works out the
	// one in force at At).
	Policy      string
	Title       string
	CallerUser  string
	CallerKeyID string
	// CreatedBy is the identity that forked: the fork is theirs to stamp
	// (Session.CreatedBy), not the source's creator's.
	CreatedBy string
}

// SessionUpdateParams changes a session and appends events in one
// transaction. Nil pointers leave fields alone. ExpectActiveRunID, when set,
// makes the whole update a compare-and-set on active_run_id (ErrConflict
// when it differs), which is how turns claim and release a session.
type SessionUpdateParams struct {
	ID                string
	ExpectActiveRunID *string
	// ActiveRunID, when set, starts the run's heartbeat afresh (now) with
	// no cancel request.
	ActiveRunID *string
	Title       *string
	Status      *string
	DoneReason  *string
	Archived    *bool
	// Policy sets the effective posture, with the policy_set event that
	// records it.
	Policy *string
	// Events are appended in order; their SessionID is set to ID.
	Events []*EventAppendParams
}

// SessionTouchParams records one API request made under a session
// (X-Holdfast-Session): requestCount+1, lastActiveAt now, caller identity.
type SessionTouchParams struct {
	ID          string
	CallerUser  string
	CallerKeyID string
}

// EventTimeFormat is how event times are written in JSON: RFC 3339, UTC,
// always six fractional digits, so clients may compare them as text.
const EventTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes TS in EventTimeFormat.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	return json.Marshal(struct {
		plain
		TS string `json:"ts"`
	}{plain(e), e.TS.UTC().Format(EventTimeFormat)})
}
