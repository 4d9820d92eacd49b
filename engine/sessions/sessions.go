// Package sessions is Holdfast's session runtime (SPEC §3): the one facade the
// JSON API, the console and the Slack bridge call to resolve, list, fork and
// poll sessions, run chat turns and the core commands. None of them keeps
// session logic of its own, so every interface behaves the same.
package sessions

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

func invalidf(format string, args ...any) error {
	return store.Refuse(store.ErrInvalid, format, args...)
}

// Engine is the part of the workflow engine sessions need, as
// *engine.Engine has it. It is an interface so the runtime can run without
// an engine (New takes nil) and tests can record what it asked.
type Engine interface {
	// Enqueue wraps store.ErrNotFound for an unknown command and
	// store.ErrConflict for a workflow that is not live.
	Enqueue(ctx context.Context, p engine.EnqueueParams) (*store.QueueItem, bool, error)
	// CancelSessionRuns cancels the session's in-flight runs and, when by
	// is a steward, rejects its holds as by's decisions.
	CancelSessionRuns(ctx context.Context, sessionID string, by engine.Decider) (engine.Cancelled, error)
	// IsSteward answers whether by may decide holds and loosen a posture.
	IsSteward(ctx context.Context, by engine.Decider) (bool, error)
}

// Config configures the runtime.
type Config struct {
	// DefaultPolicy is the posture new sessions start with.
	DefaultPolicy string
	Models        *model.Registry
	// DefaultModel is the spec chat turns use ("template" or "openai:<m>").
	DefaultModel string
	// MaxToolRounds bounds the model↔tool loop of one chat turn (default 4):
	// a model that keeps calling tools must still end the turn.
	MaxToolRounds int
	// Retries of transient model errors per call (default 2).
	Retries int
	// TurnTimeout bounds one chat turn (default 5m), so a model that never
	// answers cannot leave a session running until someone terminates it.
	TurnTimeout time.Duration
	// TurnHeartbeat is how often a running turn proves its process alive
	// and reads cancel requests made elsewhere (default 1s); a turn whose
	// heartbeat is older than TurnStale (default 10s) is taken to be lost.
	TurnHeartbeat time.Duration
	TurnStale     time.Duration
	// Tracer records each chat turn as a span with the session's
	// provenance (SPEC §10); nil records nothing.
	Tracer trace.TracerProvider
}

// Service is the session runtime.
type Service struct {
	st  store.Store
	cfg Config
	eng Engine
	log *slog.Logger

	mu     sync.Mutex
	turns  map[string]*turn // by session id: at most one active turn each
	closed bool
	wg     sync.WaitGroup

	// The cancel notices of the store (WorkSubscribe), subscribed to with
	// this process's first turn and until Close: a /terminate sent to any
	// process reaches a turn running here at once, not at its next
	// heartbeat.
	subscribe sync.Once
	subCtx    context.Context
	subStop   context.CancelFunc
}

// New returns the runtime. eng may be nil while no engine runs: enqueueing
// then fails with a clear message and /terminate cancels only chat turns.
func New(st store.Store, cfg Config, eng Engine, log *slog.Logger) *Service {
	if cfg.MaxToolRounds <= 0 {
		cfg.MaxToolRounds = 4
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 2
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 5 * time.Minute
	}
	if cfg.TurnHeartbeat <= 0 {
		cfg.TurnHeartbeat = time.Second
	}
	if cfg.TurnStale <= 0 {
		cfg.TurnStale = 10 * cfg.TurnHeartbeat
	}
	if cfg.Models == nil {
		cfg.Models = model.NewRegistry("template", model.Config{})
	}
	subCtx, subStop := context.WithCancel(context.Background())
	return &Service{st: st, cfg: cfg, eng: eng, log: log, turns: map[string]*turn{}, subCtx: subCtx, subStop: subStop}
}

// Close cancels running chat turns and waits for them to settle, so nothing
// writes to the store after its owner closes it.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.turns {
		t.cancel(errShutdown)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.subStop()
}

// CreateParams creates a session.
type CreateParams struct {
	Title        string
	Tag          string
	Context      map[string]any
	Capabilities []string
	Source       Source
	// Events are appended in the creating transaction (e.g. the bridge's
	// first user_message), so the session is never listed without them.
	Events []*store.EventAppendParams
}

// Create creates a session, classifying its origin.
func (s *Service) Create(ctx context.Context, p CreateParams) (*store.Session, error) {
	if err := checkCreate(p); err != nil {
		return nil, err
	}
	var tags []string
	if t := strings.TrimSpace(p.Tag); t != "" {
		tags = []string{t}
	}
	if err := checkTags(tags, p.Source); err != nil {
		return nil, err
	}
	origin, platform := Classify(tags, p.Context, p.Source)
	ses, err := s.st.SessionCreate(ctx, &store.SessionCreateParams{
		Title: strings.TrimSpace(p.Title), Origin: origin, Platform: platform, Tags: tags, Context: p.Context,
		Capabilities: p.Capabilities, Policy: NormalizePolicy(s.cfg.DefaultPolicy),
		CallerUser: callerUser(p.Source), CallerKeyID: p.Source.KeyID, CreatedBy: p.Source.UID(), Events: p.Events,
	})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "session created", slog.String("session_id", ses.ID), slog.String("origin", origin))
	return ses, nil
}

// checkCreate applies the shared input limits (SPEC §7) to a new session.
func checkCreate(p CreateParams) error {
	if err := store.CheckName("title", p.Title); err != nil {
		return err
	}
	if err := store.CheckName("tag", p.Tag); err != nil {
		return err
	}
	if err := store.CheckTags("capabilities", p.Capabilities); err != nil {
		return err
	}
	return store.CheckValue("context", p.Context)
}

func callerUser(src Source) string {
	if src.Username != "" {
		return src.Username
	}
	return src.UserID
}

// CreateAgent creates an agent session (POST /api/internal/sessions). Its
// purpose is its title and its first event, so it is listed (the listing
// leaves out sessions with no events) when the agent origin is toggled on.
func (s *Service) CreateAgent(ctx context.Context, purpose string, src Source) (*store.Session, error) {
	purpose = strings.TrimSpace(purpose)
	if purpose == "" {
		return nil, invalidf("purpose is required")
	}
	if err := store.CheckName("purpose", purpose); err != nil {
		return nil, err
	}
	src.Agent = true
	return s.Create(ctx, CreateParams{Title: purpose, Context: map[string]any{"purpose": purpose}, Source: src,
		Events: []*store.EventAppendParams{transcript.EncodePtr(transcript.Context{Fields: map[string]any{"purpose": purpose}}, "agent")}})
}

// GetByID reads a session.
func (s *Service) GetByID(ctx context.Context, id string) (*store.Session, error) {
	return s.st.SessionGetByID(ctx, id)
}

// GetByTag reads the session holding tag, without creating one.
func (s *Service) GetByTag(ctx context.Context, tag string) (*store.Session, error) {
	tag = strings.TrimSpace(tag)
	if tag == "" {
		return nil, invalidf("tag is required")
	}
	if err := store.CheckName("tag", tag); err != nil {
		return nil, err // no session holds a tag no session could have
	}
	return s.st.SessionGetByTag(ctx, tag)
}

// ResolveTag returns the session holding tag, creating it from create when
// none does (the Slack bridge binds a thread this way). Two racing callers
// end up with the same session.
func (s *Service) ResolveTag(ctx context.Context, tag string, create CreateParams) (*store.Session, error) {
	tag = strings.TrimSpace(tag)
	if tag == "" {
		return nil, invalidf("tag is required")
	}
	ses, err := s.st.SessionGetByTag(ctx, tag)
	if !errors.Is(err, store.ErrNotFound) {
		return ses, err
	}
	create.Tag = tag
	ses, err = s.Create(ctx, create)
	if errors.Is(err, store.ErrConflict) {
		return s.st.SessionGetByTag(ctx, tag)
	}
	return ses, err
}

// Fork creates a session holding copies of the events of id with ts ≤ at
// and the posture in force at that moment (edit-and-regenerate runs on it).
// It keeps its source's origin and platform: the fork continues the same
// conversation lineage, but holds no tag, so it is not bound to a thread.
// It is by's: by created it, so by may stamp it (X-Holdfast-Session).
func (s *Service) Fork(ctx context.Context, id string, at time.Time, by Source) (*store.Session, error) {
	if at.IsZero() {
		return nil, invalidf("atTs is required")
	}
	src, err := s.st.SessionGetByID(ctx, id)
	if err != nil {
		return nil, err
	}
	// A fork keeps the events up to at; one before the first would be an
	// empty session, which no listing shows.
	first, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(first) == 0 || at.Before(first[0].TS) {
		return nil, invalidf("atTs is before the session's first event, so the fork would keep nothing; fork at an event's ts")
	}
	policy, err := s.policyAt(ctx, src, at)
	if err != nil {
		return nil, err
	}
	ses, err := s.st.SessionFork(ctx, &store.SessionForkParams{SourceID: id, At: at, Policy: policy, Title: forkTitle(src.Title),
		CallerUser: callerUser(by), CallerKeyID: by.KeyID, CreatedBy: by.UID()})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "session forked", slog.String("session_id", ses.ID), slog.String("forked_from", id))
	return ses, nil
}

// forkTitle tells a fork from its source in listings: "Fork of <title>",
// within the title limit; an untitled source's fork is untitled too.
func forkTitle(title string) string {
	if strings.TrimSpace(title) == "" {
		return ""
	}
	const prefix = "Fork of "
	if r := []rune(title); len(r) > store.MaxNameChars-len(prefix) {
		title = string(r[:store.MaxNameChars-len(prefix)-1]) + "…"
	}
	return prefix + title
}

// ListParams filters the listing. Nil Origins means DefaultOrigins.
type ListParams struct {
	Origins         []string
	IncludeArchived bool
	Query           string
	Cursor          string
	Limit           int
}

// Page is one page of the listing; Next is empty on the last page.
type Page struct {
	Sessions []*store.Session `json:"sessions"`
	Next     string           `json:"next"`
}

// Listing page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// List pages sessions newest activity first, leaving out empty sessions and,
// unless asked, archived ones.
func (s *Service) List(ctx context.Context, p ListParams) (*Page, error) {
	origins := p.Origins
	if len(origins) == 0 {
		origins = DefaultOrigins
	}
	for _, o := range origins {
		if !ValidOrigin(o) {
			return nil, invalidf("unknown origin %q (want channel, user, workflow, api or agent)", o)
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultPageSize
	}
	if limit > MaxPageSize {
		return nil, invalidf("limit must be at most %d", MaxPageSize)
	}
	var after *store.SessionCursor
	if p.Cursor != "" {
		c, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		after = c
	}
	if q := strings.TrimSpace(p.Query); after == nil && strings.HasPrefix(q, tagWorkflow+"itm_") {
		return s.listMinted(ctx, q, p.IncludeArchived)
	}
	rows, err := s.st.SessionList(ctx, &store.SessionListParams{Origins: origins, IncludeArchived: p.IncludeArchived,
		Query: p.Query, After: after, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	page := &Page{Sessions: rows}
	if len(rows) > limit {
		page.Sessions = rows[:limit]
		last := rows[limit-1]
		page.Next = encodeCursor(last)
	}
	return page, nil
}

// listMinted answers a search for an engine-minted tag (workflow:<item
// id>), which the text index leaves out because its random ids would cost
// every enqueue and match nothing people type (issue 16): the tag is
// looked up exactly instead. A tag names one session, so it is found
// whatever the origin filter; archived and empty sessions stay left out
// as in any listing.
func (s *Service) listMinted(ctx context.Context, tag string, includeArchived bool) (*Page, error) {
	page := &Page{Sessions: []*store.Session{}}
	ses, err := s.st.SessionGetByTag(ctx, tag)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return page, nil
	case err != nil:
		return nil, err
	}
	if ses.EventCount > 0 && (includeArchived || !ses.Archived) {
		page.Sessions = append(page.Sessions, ses)
	}
	return page, nil
}

// The cursor is opaque to clients: the last row's activity time and id.
func encodeCursor(s *store.Session) string {
	return base64.RawURLEncoding.EncodeToString([]byte(s.LastActiveAt.UTC().Format(time.RFC3339Nano) + " " + s.ID))
}

func decodeCursor(c string) (*store.SessionCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		ts, id, ok := strings.Cut(string(raw), " ")
		if t, perr := time.Parse(time.RFC3339Nano, ts); ok && perr == nil && id != "" {
			return &store.SessionCursor{LastActiveAt: t, ID: id}, nil
		}
	}
	return nil, invalidf("malformed cursor %q (pass back the listing's next value)", c)
}

// Event page sizes.
const (
	DefaultEventPage = 200
	MaxEventPage     = 1000
)

// Events returns the session's events with ts strictly after after (zero:
// from the start), oldest first, at most limit of them.
func (s *Service) Events(ctx context.Context, id string, after time.Time, limit int) ([]*store.Event, error) {
	if limit <= 0 {
		limit = DefaultEventPage
	}
	if limit > MaxEventPage {
		return nil, invalidf("limit must be at most %d", MaxEventPage)
	}
	evs, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		// An empty page must still tell an unknown session apart.
		if _, err := s.st.SessionGetByID(ctx, id); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// LatestEvents returns the newest limit events, oldest first: where a
// transcript view starts before polling Events after the last one.
func (s *Service) LatestEvents(ctx context.Context, id string, limit int) ([]*store.Event, error) {
	if limit <= 0 {
		limit = DefaultEventPage
	}
	if limit > MaxEventPage {
		return nil, invalidf("limit must be at most %d", MaxEventPage)
	}
	evs, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, Newest: true, Limit: limit})
	if err == nil && len(evs) == 0 {
		_, err = s.st.SessionGetByID(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// Archive hides a session from the default listing.
func (s *Service) Archive(ctx context.Context, id string) (*store.Session, error) {
	return s.setArchived(ctx, id, true)
}

// Unarchive shows it again.
func (s *Service) Unarchive(ctx context.Context, id string) (*store.Session, error) {
	return s.setArchived(ctx, id, false)
}

func (s *Service) setArchived(ctx context.Context, id string, archived bool) (*store.Session, error) {
	ses, _, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, Archived: &archived})
	return ses, err
}

// SetPolicy records a policy_set event; the store sets the session's
// effective posture in the same transaction. A change that holds less than
// the current posture needs a steward, on every surface (SPEC §3); a
// refusal wraps store.ErrForbidden and records nothing.
func (s *Service) SetPolicy(ctx context.Context, id, policy string, by engine.Decider) (*store.Session, error) {
	p := strings.ToLower(strings.TrimSpace(policy))
	if p != store.PolicyManual && p != store.PolicyAuto && p != store.PolicyYolo {
		return nil, invalidf("policy must be manual, auto or yolo, got %q", policy)
	}
	cur, err := s.st.SessionGetByID(ctx, id)
	if err != nil {
		return nil, err
	}
	from := NormalizePolicy(cur.Policy)
	if strictness(p) < strictness(from) {
		ok, err := s.isSteward(ctx, by)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, store.Refuse(store.ErrForbidden, "only a steward may change the posture from %s to %s, which holds less", from, p)
		}
	}
	if cur.Policy == p {
		return cur, nil // nothing changes, so nothing is recorded
	}
	ses, _, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, Policy: &p,
		Events: []*store.EventAppendParams{transcript.EncodePtr(transcript.PolicySet{Policy: p}, by.UID())}})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "session policy set", slog.String("session_id", id), slog.String("policy", p), slog.String("actor", by.UID()))
	return ses, nil
}

// NormalizePolicy coerces a posture: unknown or empty values count as
// manual, the strictest (SPEC §3).
func NormalizePolicy(p string) string {
	switch p {
	case store.PolicyAuto, store.PolicyYolo:
		return p
	}
	return store.PolicyManual
}

// policyAt is "policy follows head" (seed 001): the posture in force at ts
// is the newest policy_set at or before it, else the one the session
// started with.
func (s *Service) policyAt(ctx context.Context, src *store.Session, ts time.Time) (string, error) {
	evs, err := s.st.EventList(ctx, &store.EventListParams{SessionID: src.ID, Types: []string{transcript.TypePolicySet},
		Until: ts, Newest: true, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(evs) == 0 {
		return NormalizePolicy(src.BasePolicy), nil
	}
	set, _ := transcript.Read(ctx, s.log, evs[0]).(transcript.PolicySet) // unreadable: manual, as an unknown posture
	return NormalizePolicy(set.Policy), nil
}

// strictness orders postures by how much they hold.
func strictness(policy string) int {
	switch policy {
	case store.PolicyYolo:
		return 0
	case store.PolicyAuto:
		return 1
	}
	return 2
}

// isSteward asks the engine; with no engine only a surface's role counts.
func (s *Service) isSteward(ctx context.Context, by engine.Decider) (bool, error) {
	if s.eng == nil {
		return store.CanDecide(by.Role), nil
	}
	return s.eng.IsSteward(ctx, by)
}

// Caller is who makes a tracked request.
type Caller struct {
	// UID names the caller as auth.Identity.UID does ("user:<id>",
	// "key:<id>"); empty for the internal key.
	UID      string
	Username string
	KeyID    string
	// Admin is set for admins and for the internal key, the deployment's
	// own secret: they may stamp any session.
	Admin bool
}

// Track counts an API request made under the session (X-Holdfast-Session):
// requestCount+1, lastActiveAt now, caller identity refreshed. Only the
// identity that created the session, or an admin, may stamp it (SPEC §3):
// anyone else gets ErrForbidden and nothing is counted. A session with no
// recorded creator (made by Slack, the engine or the internal key alone) is
// stamped by admins only. An unknown session wraps store.ErrNotFound.
func (s *Service) Track(ctx context.Context, id string, c Caller) error {
	ses, err := s.st.SessionGetByID(ctx, id)
	if err != nil {
		return err
	}
	if !c.Admin && (ses.CreatedBy == "" || ses.CreatedBy != c.UID) {
		return store.Refuse(store.ErrForbidden, "only the identity that created session %s, or an admin, may stamp it", id)
	}
	return s.st.SessionTouch(ctx, &store.SessionTouchParams{ID: id, CallerUser: c.Username, CallerKeyID: c.KeyID})
}

// AppendEvent appends one transcript event, e.g. a thread message the bridge
// records without starting a turn. policy_set goes through SetPolicy, which
// validates the posture.
func (s *Service) AppendEvent(ctx context.Context, id, typ, actor string, payload map[string]any) (*store.Event, error) {
	if strings.TrimSpace(typ) == "" {
		return nil, invalidf("event type is required")
	}
	if typ == transcript.TypePolicySet {
		return nil, invalidf("set the posture with SetPolicy")
	}
	return s.st.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Type: typ, Actor: actor, Payload: payload})
}
