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
	// ErrInvalid marks input a caller must fix (400): a text that is not
	// UTF-8, holds NUL or is past its limit, a bad field, an unknown enum.
	ErrInvalid = errors.New("invalid")
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
// the error's text without the word of the sentinel it wraps ("conflict: "
// before it, ": not found" after it), which says what kind of error it is
// to code, not to the person reading it.
func ReasonOf(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	msg := err.Error()
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			continue
		}
		// "memo update mem_1: conflict: memo is at version 2": what
		// follows the sentinel is the reason; what precedes it is where.
		if _, after, ok := strings.Cut(msg, s.Error()+": "); ok && after != "" {
			msg = after
		}
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	return msg
}

var sentinels = []error{ErrNotFound, ErrConflict, ErrForbidden, ErrInvalid, ErrTooLarge}

// ErrStaleCompile refuses a memo write (or a re-index) that would leave a
// workflow's index describing a library that no longer exists: a workflow
// naming the written memo is missing from the write's Dependents, a name an
// index records no longer answers as it did, or a workflow changed since it
// was recompiled. The library recompiles against the store as it is now and
// tries again; it is not a conflict the caller made.
var ErrStaleCompile = errors.New("workflow compile is stale")

// Store is everything Holdfast persists. Methods are named noun-then-verb and
// take ctx first, as River's driver does.
type Store interface {
	MemoStore
	WorkflowStore
	UserStore
	SessionStore
	EngineStore  // store/engine.go: queue items, runs, holds
	SlackStore   // store/slack.go: the Slack inbox and outbox
	StewardStore // store/steward.go: hold reminders, App Home reads
	ConsoleStore // store/console.go: console sign-in sessions
	InsightStore // store/insight.go: usage and edges of understanding
	LeaseStore   // store/lease.go: named leases (the replicas' leader)

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
// workflow in the same transaction; a workflow memo must have it.
// Dependents re-index, in the same transaction, every workflow that names
// the new memo's title or id (see WorkflowRecompile): a create that leaves
// one out is ErrStaleCompile and writes nothing.
type MemoCreateParams struct {
	Title      string
	Body       string
	MemoType   string
	Tags       []string
	Notes      string
	Unlisted   bool
	Workflow   *WorkflowIndex
	Dependents []*WorkflowRecompile
}

// MemoUpdateParams is a compare-and-set update: it applies only while the
// memo's contentVersion still equals ExpectedVersion, else ErrConflict.
// Nil pointers leave a field as it is. A workflow memo's body changes only
// with its Workflow index. Dependents are MemoCreateParams', for every
// workflow naming the memo's id or its title before or after the update.
type MemoUpdateParams struct {
	ID              string
	ExpectedVersion int64
	Title           *string
	Body            *string
	Notes           *string
	Tags            *[]string
	Unlisted        *bool
	Workflow        *WorkflowIndex
	Dependents      []*WorkflowRecompile
}

// MemoSearchParams lists memos. A non-empty Query is a full-text match over
// title and body ranked by relevance; otherwise newest updates come first.
// The filters are structured (engine/search parses the query grammar into
// them): MemoType keeps one type ("" every type), Tags keeps memos carrying
// every one of them (compared as titles are, ignoring the case of ASCII
// letters), UpdatedSince keeps memos updated at or after it (zero: any).
// Filters are served by indexes, with or without a Query.
type MemoSearchParams struct {
	Query           string
	MemoType        string
	Tags            []string
	UpdatedSince    time.Time
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
	// MemoIDsNamed lists the ids of the memos answering to name as a Gate or
	// Hook name (NameMatchesMemo): the memo with that id, and every memo
	// with that title. None is an empty list, not ErrNotFound.
	MemoIDsNamed(ctx context.Context, name string) ([]string, error)
}

// NameMatchesMemo reports whether a Gate or Hook name names the memo with
// this id and title (SPEC §4.1: memos are named by title or id): its id
// exactly, or its title ignoring the case of ASCII letters, the comparison
// every store's title lookup makes (SQLite's NOCASE). The library uses it to
// see the library as a pending write will leave it; the store checks the
// same rule when the write commits.
func NameMatchesMemo(name, id, title string) bool {
	if name == id {
		return true
	}
	if len(name) != len(title) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if lowerASCII(name[i]) != lowerASCII(title[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
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
	// Names are the Gate and Hook names the compile looked up, each with
	// the answer it got. The store keeps them, which is how a write of a
	// memo finds the workflows naming it, and checks every answer again when
	// the index is written: one that no longer holds is ErrStaleCompile.
	Names []WorkflowName
}

// WorkflowName is one name a workflow's compile looked up and whether a
// memo answered to it.
type WorkflowName struct {
	Name   string
	Exists bool
}

// WorkflowRecompile is a workflow re-indexed because the library changed
// (a memo it names was written, or the index predates what the store now
// keeps). MemoVersion and Revision are the workflow memo's contentVersion
// and its index's revision as read for the compile: if either has moved
// when the write commits, the write is ErrStaleCompile.
type WorkflowRecompile struct {
	MemoID      string
	MemoVersion int64
	Revision    int64
	Index       *WorkflowIndex
}

// WorkflowSource is what recompiling a workflow needs: its memo, its index
// as stored, the index's revision and the names the index records.
type WorkflowSource struct {
	Memo     *Memo
	Workflow *Workflow
	Revision int64
	Names    []string
}

// WorkflowSourceListParams selects workflows to recompile: those whose
// index records any of Names (compared as titles are), or every workflow
// when All is set.
type WorkflowSourceListParams struct {
	Names []string
	All   bool
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
	// WorkflowSourceList reads the workflows p selects, for recompiling.
	WorkflowSourceList(ctx context.Context, p *WorkflowSourceListParams) ([]*WorkflowSource, error)
	// WorkflowReindex writes recompiled indexes in one transaction, checked
	// as a memo write's Dependents are (ErrStaleCompile).
	WorkflowReindex(ctx context.Context, rs []*WorkflowRecompile) error
}

// Roles, weakest first.
const (
	RoleViewer  = "viewer"
	RoleSteward = "steward"
	RoleAdmin   = "admin"
)

// ValidRole reports whether r is one of the three roles.
func ValidRole(r string) bool { return r == RoleViewer || r == RoleSteward || r == RoleAdmin }

// RoleAtLeast reports whether role is min or a stronger one.
func RoleAtLeast(role, min string) bool { return roleRank[role] >= roleRank[min] && roleRank[min] > 0 }

var roleRank = map[string]int{RoleViewer: 1, RoleSteward: 2, RoleAdmin: 3}

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
	// RevokedAt is when the key stopped working (nil: it works).
	RevokedAt *time.Time `json:"revokedAt"`
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
	// APIKeyGetByHash looks a key up by its SHA-256 hex hash; a revoked
	// key is ErrNotFound.
	APIKeyGetByHash(ctx context.Context, hash string) (*APIKey, error)
	// APIKeyList lists every key, revoked ones too, oldest first.
	APIKeyList(ctx context.Context) ([]*APIKey, error)
	// APIKeyRevoke stops a key working from now on (a key revoked already
	// keeps its first revocation); ErrNotFound for no such key.
	APIKeyRevoke(ctx context.Context, id string, now time.Time) (*APIKey, error)
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
	// BasePolicy is the posture the session started with, before any
	// policy_set event.
	BasePolicy   string `json:"-"`
	RequestCount int64  `json:"requestCount"`
	CallerUser   string `json:"callerUser"`
	CallerKeyID  string `json:"callerKeyId"`
	// CreatedBy is the identity that created the session ("user:<id>",
	// "key:<id>"; empty when the bridge, the engine or the internal key
	// did): the one caller besides admins that may stamp it (SPEC §3).
	CreatedBy   string `json:"createdBy"`
	ActiveRunID string `json:"activeRunId"`
	// TurnHeartbeatAt is when the active run's process last proved alive.
	TurnHeartbeatAt *time.Time `json:"-"`
	EventCount      int64      `json:"eventCount"`
	OpenHolds       int64      `json:"openHolds"`
	LastActiveAt    time.Time  `json:"lastActiveAt"`
	CreatedAt       time.Time  `json:"createdAt"`
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
	// CreatedBy records the creating identity (see Session.CreatedBy).
	CreatedBy string
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
type SessionStore interface {
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*Session, error)
	SessionGetByID(ctx context.Context, id string) (*Session, error)
	// SessionGetBare reads the session row alone, OpenHolds left zero: the
	// read for a run's prompt and an enqueue's origin, which need no count
	// of open holds (a query per read on the hottest path).
	SessionGetBare(ctx context.Context, id string) (*Session, error)
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
	// SessionTurnHeartbeat refreshes the heartbeat of the session's active
	// run turnID and answers the cancel request made for it, if any; a
	// session no longer running turnID is ErrConflict.
	SessionTurnHeartbeat(ctx context.Context, sessionID, turnID string, now time.Time) (cancel string, err error)
	// SessionTurnCancel records a cancel request for the session's active
	// run turnID (ErrConflict when it is no longer active) and sends it as a
	// WorkCancel notice, so the process answering the turn stops it at once
	// instead of at its next heartbeat.
	SessionTurnCancel(ctx context.Context, sessionID, turnID, reason string) error
	// SessionTurnsInterrupt settles every session whose active run's
	// heartbeat is older than staleBefore as failed with reason.
	SessionTurnsInterrupt(ctx context.Context, staleBefore time.Time, reason string) (int64, error)
	// SessionOpenHoldCounts answers open holds per session id in one query
	// (ids without open holds are absent).
	SessionOpenHoldCounts(ctx context.Context, ids []string) (map[string]int64, error)
	EventAppend(ctx context.Context, p *EventAppendParams) (*Event, error)
	// EventList reads a transcript in ts order; see EventListParams.
	EventList(ctx context.Context, p *EventListParams) ([]*Event, error)
	// EventSubscribe answers a channel that carries, after every commit that
	// appended transcript events, whatever wrote them (a chat turn, the
	// engine, the Slack inbox, the console), the highest event id committed;
	// every event with a lower id is committed by then. It is how the Slack
	// mirror learns of a write at once instead of at its next tick (SPEC §5:
	// within 50 ms), without each writer having to remember to wake it. A
	// wake-up, not a feed: ids coalesce (one may stand for several commits)
	// and a slow reader never holds up a writer; read the events themselves
	// from the store. The channel is closed when ctx is done or the store
	// closes. A store shared by several processes (PostgreSQL, §9) notifies
	// across them.
	EventSubscribe(ctx context.Context) <-chan int64
}

// NewID returns a time-ordered, URL-safe id with a readable prefix such as
// "mem". Ordering by id then follows creation, which keyset pages rely on
// to break ties, and new rows land at the end of an id index. The base32
// alphabet is the "extended hex" one, whose digits sort before its letters
// as they do in ASCII.
func NewID(prefix string) string {
	var b [13]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "_" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// HashContent is the content hash kept on memos and used by dispatch's move
// guard (payload.source.contentHash / notesHash).
func HashContent(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
