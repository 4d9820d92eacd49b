// Package store defines the persistence contract of Holdfast: the types every
// part shares and the one interface through which the engine, the Slack bridge
// and the console reach the database. All SQL lives in implementations
// (store/sqlite today; a PostgreSQL one must be able to pass storetest too).
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Implementations translate their driver's not-found and
// constraint errors into these in exactly one place, so callers can map them
// to 404 and 409 without knowing the database.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")
	ErrForbidden = errors.New("forbidden")
)

// Refusal is an error a surface shows its caller as it stands: Reason is
// the sentence to show, Kind the sentinel that picks the status code. It
// exists so that no surface parses an error's text to find the sentence.
type Refusal struct {
	Kind   error
	Reason string
}

func (r *Refusal) Error() string { return r.Kind.Error() + ": " + r.Reason }
func (r *Refusal) Unwrap() error { return r.Kind }

// Refuse builds a Refusal of kind (ErrForbidden, ErrConflict, …).
func Refuse(kind error, format string, args ...any) error {
	return &Refusal{Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// ReasonOf answers the sentence to show for err: a Refusal's reason, else
// the error's text.
func ReasonOf(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return err.Error()
}

// Store is everything Holdfast persists. Methods are named noun-then-verb and
// take ctx first, as River's driver does.
type Store interface {
	MemoStore
	WorkflowStore
	UserStore
	SessionStore
	EngineStore  // store/engine.go: queue items, runs, holds
	SlackStore   // store/slack.go: the Slack inbox and outbox
	ConsoleStore // store/console.go: console sign-in sessions

	// Ping answers whether the database is reachable (for /healthz).
	Ping(ctx context.Context) error
	Close() error
}

// Memo is a markdown document in the library.
type Memo struct {
	ID             string    `json:"id"`
	Title          string    `json:"title"`
	Body           string    `json:"body"`
	MemoType       string    `json:"memoType"`
	Tags           []string  `json:"tags"`
	Notes          string    `json:"notes"`
	Unlisted       bool      `json:"unlisted"`
	ContentVersion int64     `json:"contentVersion"`
	ContentHash    string    `json:"contentHash"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
}

// MemoTypeWorkflow marks memos the workflow compiler reads.
const MemoTypeWorkflow = "workflow"

// MemoCreateParams creates a memo. Workflow, when set, indexes the memo as a
// workflow in the same transaction.
type MemoCreateParams struct {
	Title    string
	Body     string
	MemoType string
	Tags     []string
	Notes    string
	Unlisted bool
	Workflow *WorkflowIndex
}

// MemoUpdateParams is a compare-and-set update: it applies only while the
// memo's contentVersion still equals ExpectedVersion, else ErrConflict.
// Nil pointers leave a field as it is.
type MemoUpdateParams struct {
	ID              string
	ExpectedVersion int64
	Title           *string
	Body            *string
	Notes           *string
	Tags            *[]string
	Unlisted        *bool
	Workflow        *WorkflowIndex
}

// MemoSearchParams lists memos. A non-empty Query is a full-text match over
// title and body ranked by relevance; otherwise newest updates come first.
type MemoSearchParams struct {
	Query           string
	MemoType        string
	IncludeUnlisted bool
	Limit           int
	// Offset skips that many results (a later page of the same search).
	Offset int
}

// MemoStore persists the memo library.
type MemoStore interface {
	MemoCreate(ctx context.Context, p *MemoCreateParams) (*Memo, error)
	MemoGetByID(ctx context.Context, id string) (*Memo, error)
	// MemoGetByTitle finds a memo by exact title (case-insensitive); the
	// newest wins when titles repeat.
	MemoGetByTitle(ctx context.Context, title string) (*Memo, error)
	MemoUpdate(ctx context.Context, p *MemoUpdateParams) (*Memo, error)
	MemoSearch(ctx context.Context, p *MemoSearchParams) ([]*Memo, error)
}

// CompileError is one workflow compile error as stored and shown.
type CompileError struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// WorkflowIndex is what the store keeps of a compiled workflow memo so that
// listing workflows and routing a command never compile anything.
type WorkflowIndex struct {
	Command string
	Status  string
	Summary string
	Invoke  string
	Errors  []CompileError
}

// Workflow is a row of the workflow index joined with its memo's title.
type Workflow struct {
	MemoID    string         `json:"memoId"`
	Title     string         `json:"title"`
	Command   string         `json:"command"`
	Status    string         `json:"status"`
	Summary   string         `json:"summary"`
	Invoke    string         `json:"invoke"`
	Errors    []CompileError `json:"errors"`
	UpdatedAt time.Time      `json:"updatedAt"`
}

// WorkflowStore reads the workflow index (written with memo writes).
type WorkflowStore interface {
	WorkflowList(ctx context.Context) ([]*Workflow, error)
	// WorkflowGetByCommand takes the command with its leading slash.
	WorkflowGetByCommand(ctx context.Context, command string) (*Workflow, error)
	WorkflowGetByMemoID(ctx context.Context, memoID string) (*Workflow, error)
	// WorkflowStatusSet pauses or resumes a workflow without editing its memo.
	WorkflowStatusSet(ctx context.Context, memoID, status string) (*Workflow, error)
}

// Roles, weakest first.
const (
	RoleViewer  = "viewer"
	RoleSteward = "steward"
	RoleAdmin   = "admin"
)

// ValidRole reports whether r is one of the three roles.
func ValidRole(r string) bool { return r == RoleViewer || r == RoleSteward || r == RoleAdmin }

// CanDecide reports whether a role may approve or reject holds.
func CanDecide(role string) bool { return role == RoleSteward || role == RoleAdmin }

// User is a console user; SlackUserID links a Slack identity for decisions.
// A Disabled user cannot sign in, and their sign-ins stop working.
type User struct {
	ID           string    `json:"id"`
	Username     string    `json:"username"`
	PasswordHash string    `json:"-"`
	Role         string    `json:"role"`
	SlackUserID  string    `json:"slackUserId"`
	Disabled     bool      `json:"disabled"`
	CreatedAt    time.Time `json:"createdAt"`
}

// APIKey is an API key's record; the key itself is never stored.
type APIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	KeyHash    string     `json:"-"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
}

// UserStore persists console users and API keys.
type UserStore interface {
	UserCreate(ctx context.Context, u *User) (*User, error)
	UserGetByID(ctx context.Context, id string) (*User, error)
	UserGetByUsername(ctx context.Context, username string) (*User, error)
	UserGetBySlackID(ctx context.Context, slackUserID string) (*User, error)
	UserList(ctx context.Context) ([]*User, error)
	UserCount(ctx context.Context) (int, error)
	APIKeyCreate(ctx context.Context, k *APIKey) (*APIKey, error)
	// APIKeyGetByHash looks a key up by its SHA-256 hex hash.
	APIKeyGetByHash(ctx context.Context, hash string) (*APIKey, error)
}

// Session origins (SPEC §3).
const (
	OriginChannel  = "channel"
	OriginUser     = "user"
	OriginWorkflow = "workflow"
	OriginAPI      = "api"
	OriginAgent    = "agent"
)

// Session is a conversation; see SPEC §3.
type Session struct {
	ID           string         `json:"id"`
	Title        string         `json:"title"`
	Status       string         `json:"status"`
	DoneReason   string         `json:"doneReason"`
	Origin       string         `json:"origin"`
	Platform     string         `json:"platform"`
	Tags         []string       `json:"tags"`
	Context      map[string]any `json:"context"`
	Capabilities []string       `json:"capabilities"`
	Archived     bool           `json:"archived"`
	ForkedFrom   string         `json:"forkedFrom"`
	Policy       string         `json:"policy"`
	RequestCount int64          `json:"requestCount"`
	CallerUser   string         `json:"callerUser"`
	CallerKeyID  string         `json:"callerKeyId"`
	ActiveRunID  string         `json:"activeRunId"`
	EventCount   int64          `json:"eventCount"`
	OpenHolds    int64          `json:"openHolds"`
	LastActiveAt time.Time      `json:"lastActiveAt"`
	CreatedAt    time.Time      `json:"createdAt"`
}

// Event is one append-only transcript entry. IDs grow monotonically across
// all sessions; TS is unique within a session so `after` polling is exact.
type Event struct {
	ID        int64          `json:"id"`
	SessionID string         `json:"sessionId"`
	TS        time.Time      `json:"ts"`
	Type      string         `json:"type"`
	Actor     string         `json:"actor"`
	Payload   map[string]any `json:"payload"`
}

// SessionCreateParams creates a session; Origin and Platform are computed by
// the caller's classifier, never taken from user input.
type SessionCreateParams struct {
	Title        string
	Origin       string
	Platform     string
	Tags         []string
	Context      map[string]any
	Capabilities []string
	Policy       string
	ForkedFrom   string
	CallerUser   string
	CallerKeyID  string
	// Events are appended in the creating transaction (their SessionID is
	// set), so a session is never seen without its first events.
	Events []*EventAppendParams
}

// EventAppendParams appends an event to a session's transcript.
type EventAppendParams struct {
	SessionID string
	Type      string
	Actor     string
	Payload   map[string]any
}

// SessionStore persists sessions and their events (types in sessions.go).
// Appending a policy_set event also sets the session's effective policy in
// the same transaction, whoever appends it.
type SessionStore interface {
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*Session, error)
	SessionGetByID(ctx context.Context, id string) (*Session, error)
	// SessionGetByTag finds the one session holding tag.
	SessionGetByTag(ctx context.Context, tag string) (*Session, error)
	// SessionList pages non-empty sessions, newest activity first.
	SessionList(ctx context.Context, p *SessionListParams) ([]*Session, error)
	// SessionFork creates a session from another's events up to p.At.
	SessionFork(ctx context.Context, p *SessionForkParams) (*Session, error)
	// SessionUpdate changes fields and appends events in one transaction.
	SessionUpdate(ctx context.Context, p *SessionUpdateParams) (*Session, []*Event, error)
	// SessionTouch counts a request made under the session.
	SessionTouch(ctx context.Context, p *SessionTouchParams) error
	// SessionTurnsInterrupt settles every session whose active run is a
	// chat turn (id prefix "turn_") as failed with reason: turns live in one
	// process, so at its start any such run is one that process lost.
	SessionTurnsInterrupt(ctx context.Context, reason string) (int64, error)
	// SessionOpenHoldCounts answers open holds per session id in one query
	// (ids without open holds are absent).
	SessionOpenHoldCounts(ctx context.Context, ids []string) (map[string]int64, error)
	EventAppend(ctx context.Context, p *EventAppendParams) (*Event, error)
	// EventList reads a transcript in ts order; see EventListParams.
	EventList(ctx context.Context, p *EventListParams) ([]*Event, error)
}

// NewID returns a time-ordered, URL-safe id with a readable prefix such as
// "mem". Ordering by id then follows creation, which keyset pages rely on.
func NewID(prefix string) string {
	var b [13]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// HashContent is the content hash kept on memos and used by dispatch's move
// guard (payload.source.contentHash / notesHash).
func HashContent(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
