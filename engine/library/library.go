// Package library is the memo library's service: every memo write goes
// through it so that workflow memos are compiled and their index row is
// written in the same transaction as the memo, and so that every workflow
// naming the memo (a Gate or Hook, by title or id) is recompiled in that
// transaction too (SPEC §4.1: compile status follows the library). The store
// only keeps and checks: it records which names each workflow looked up,
// lists the workflows naming a memo, and refuses a write whose recompiles
// are missing or stale (store.ErrStaleCompile); the compiling is done here.
package library

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// Service writes and reads memos.
type Service struct {
	store store.Store
	log   *slog.Logger
	cache struct {
		mu      sync.Mutex
		entries map[string]compiled
	}
}

// New returns a library service over s.
func New(s store.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc := &Service{store: s, log: log}
	svc.cache.entries = map[string]compiled{}
	return svc
}

// Compile compiles a workflow memo body against the current library, so
// Gate and Hook names are checked against memos that exist now.
func (s *Service) Compile(ctx context.Context, body string) (*workflow.Manifest, workflow.Errors) {
	return workflow.Compile([]byte(body), workflow.Options{MemoExists: func(name string) bool {
		return s.exists(ctx, name)
	}})
}

// CompileMemo compiles a workflow memo as Compile does, reusing the parse of
// content it has compiled before (keyed by the memo's content hash): the
// manifest depends only on the body and on which memos its Gate and Hook
// lines name exist, and those names are looked up afresh on every call, so
// the result is always that of a fresh compile of the current library. The
// manifest is shared by every caller and must not be changed; raw is its
// JSON, as a run records it.
func (s *Service) CompileMemo(ctx context.Context, m *store.Memo) (man *workflow.Manifest, raw json.RawMessage, errs workflow.Errors) {
	key := m.ID + ":" + m.ContentHash
	s.cache.mu.Lock()
	c, ok := s.cache.entries[key]
	s.cache.mu.Unlock()
	if !ok {
		var names []string
		man, errs := workflow.Compile([]byte(m.Body), workflow.Options{MemoExists: func(name string) bool {
			names = append(names, name)
			return true
		}})
		if len(errs) > 0 {
			return s.compileFresh(ctx, m.Body) // not worth keeping: the errors come from a real compile
		}
		raw, err := json.Marshal(man)
		if err != nil {
			return nil, nil, workflow.Errors{{Line: 1, Message: "manifest: " + err.Error()}}
		}
		c = compiled{man: man, raw: raw, names: names}
		s.cache.mu.Lock()
		if len(s.cache.entries) >= compileCacheSize {
			clear(s.cache.entries) // workflows are few; a full cache is an edit storm
		}
		s.cache.entries[key] = c
		s.cache.mu.Unlock()
	}
	for _, name := range c.names {
		if !s.exists(ctx, name) {
			return s.compileFresh(ctx, m.Body) // a named memo is gone: the compile says where
		}
	}
	return c.man, c.raw, nil
}

func (s *Service) compileFresh(ctx context.Context, body string) (*workflow.Manifest, json.RawMessage, workflow.Errors) {
	man, errs := s.Compile(ctx, body)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	raw, err := json.Marshal(man)
	if err != nil {
		return nil, nil, workflow.Errors{{Line: 1, Message: "manifest: " + err.Error()}}
	}
	return man, raw, nil
}

// compileCacheSize bounds CompileMemo's cache.
const compileCacheSize = 256

// compiled is a cached parse and the memo names it depends on.
type compiled struct {
	man   *workflow.Manifest
	raw   json.RawMessage
	names []string
}

func (s *Service) exists(ctx context.Context, name string) bool {
	if _, err := s.store.MemoGetByTitle(ctx, name); err == nil {
		return true
	}
	_, err := s.store.MemoGetByID(ctx, name)
	return err == nil
}

// view is the library as a pending memo write will leave it, for compiling
// workflows in that write: names answer as the store says now, except that
// the memo being written answers to its id and its title after the write
// only. Answers are memoised, so every compile in one write sees one library.
type view struct {
	ctx     context.Context
	store   store.Store
	id      string // the memo written; "" for a create (its id is not known yet)
	title   string // its title after the write; "" when nothing is written
	writing bool
	answers map[string]bool
	err     error
}

func (s *Service) view(ctx context.Context, id, title string, writing bool) *view {
	return &view{ctx: ctx, store: s.store, id: id, title: title, writing: writing, answers: map[string]bool{}}
}

func (v *view) exists(name string) bool {
	if a, ok := v.answers[name]; ok {
		return a
	}
	ids, err := v.store.MemoIDsNamed(v.ctx, name)
	if err != nil {
		v.err = fmt.Errorf("looking up memo %q: %w", name, err)
		return false
	}
	n := 0
	for _, id := range ids {
		if id != v.id || !v.writing {
			n++
		}
	}
	if v.writing && store.NameMatchesMemo(name, v.id, v.title) {
		n++
	}
	v.answers[name] = n > 0
	return n > 0
}

// index compiles body against v and returns the index row to write, with
// the names the compile looked up and their answers.
func (s *Service) index(v *view, body string) (*store.WorkflowIndex, error) {
	var names []store.WorkflowName
	m, errs := workflow.Compile([]byte(body), workflow.Options{MemoExists: func(name string) bool {
		ok := v.exists(name)
		if !slices.ContainsFunc(names, func(n store.WorkflowName) bool { return n.Name == name }) {
			names = append(names, store.WorkflowName{Name: name, Exists: ok})
		}
		return ok
	}})
	if v.err != nil {
		return nil, v.err
	}
	if len(errs) > 0 {
		idx := &store.WorkflowIndex{Status: workflow.StatusDraft, Names: names}
		for _, e := range errs {
			idx.Errors = append(idx.Errors, store.CompileError{Line: e.Line, Message: e.Message})
		}
		// A broken memo still claims its command when the Trigger names one,
		// so the listing shows its errors under the command authors know.
		if cmd := commandOf(body); cmd != "" {
			idx.Command = cmd
		}
		return idx, nil
	}
	return &store.WorkflowIndex{Command: m.Command, Status: m.Status, Summary: m.Summary, Invoke: m.Invoke, Names: names}, nil
}

// reindex recompiles a workflow because the library changed, not its own
// memo. A workflow that compiled before and still does keeps the status it
// has (a steward may have paused or resumed it, and its memo is the same);
// otherwise it takes what the compile says: draft while it does not compile,
// and the status its memo declares once it does again.
func (s *Service) reindex(v *view, src *store.WorkflowSource) (*store.WorkflowRecompile, error) {
	idx, err := s.index(v, src.Memo.Body)
	if err != nil {
		return nil, err
	}
	if len(idx.Errors) == 0 && len(src.Workflow.Errors) == 0 {
		idx.Status = src.Workflow.Status
	}
	return &store.WorkflowRecompile{MemoID: src.Memo.ID, MemoVersion: src.Memo.ContentVersion, Revision: src.Revision, Index: idx}, nil
}

// dependents recompiles, against v, every workflow naming any of names
// (the written memo's id and its titles before and after), except the memo
// itself when the write carries its own index.
func (s *Service) dependents(v *view, self string, names ...string) ([]*store.WorkflowRecompile, error) {
	var unique []string
	for _, n := range names {
		if n != "" && !slices.Contains(unique, n) {
			unique = append(unique, n)
		}
	}
	srcs, err := s.store.WorkflowSourceList(v.ctx, &store.WorkflowSourceListParams{Names: unique})
	if err != nil {
		return nil, err
	}
	var out []*store.WorkflowRecompile
	for _, src := range srcs {
		if src.Memo.ID == self {
			continue
		}
		r, err := s.reindex(v, src)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// staleRetries bounds how often one memo write is recompiled and tried
// again when the library changed under it (store.ErrStaleCompile).
const staleRetries = 8

// retryStale runs write until it does not fail with store.ErrStaleCompile.
// Each attempt recompiles against the library as it then is, so only a
// library changing that fast, for that long, makes the write give up, as a
// conflict the caller may retry.
func retryStale(write func() error) error {
	var err error
	for range staleRetries {
		if err = write(); !errors.Is(err, store.ErrStaleCompile) {
			return err
		}
	}
	return fmt.Errorf("%w: the workflows naming this memo kept changing while it was written; try again: %w", store.ErrConflict, err)
}

// prepareCreate fills in cp's own index (a workflow memo's) and the
// workflows its title names, against the library as the create leaves it.
func (s *Service) prepareCreate(ctx context.Context, cp *store.MemoCreateParams) error {
	v := s.view(ctx, "", cp.Title, true)
	cp.Workflow = nil
	if cp.MemoType == store.MemoTypeWorkflow {
		idx, err := s.index(v, cp.Body)
		if err != nil {
			return err
		}
		cp.Workflow = idx
	}
	deps, err := s.dependents(v, "", cp.Title)
	cp.Dependents = deps
	return err
}

// prepareUpdate does prepareCreate's work for an update of the memo cur.
func (s *Service) prepareUpdate(ctx context.Context, cur *store.Memo, up *store.MemoUpdateParams) error {
	title := cur.Title
	if up.Title != nil {
		title = *up.Title
	}
	v := s.view(ctx, cur.ID, title, true)
	up.Workflow = nil
	if cur.MemoType == store.MemoTypeWorkflow {
		body := cur.Body
		if up.Body != nil {
			body = *up.Body
		}
		idx, err := s.index(v, body)
		if err != nil {
			return err
		}
		if err := s.keepStewardStatus(ctx, cur, idx); err != nil {
			return err
		}
		up.Workflow = idx
	}
	deps, err := s.dependents(v, cur.ID, cur.ID, cur.Title, title)
	up.Dependents = deps
	return err
}

// keepStewardStatus keeps a steward's pause (or resume) through an edit
// of the workflow's own memo that leaves its Status line as it was, as
// reindex keeps it through edits of the memos it names: the edit was about
// something else. An edit that changes the declared status is the author
// saying what it should be, and a workflow that did not compile before, or
// does not now, takes what the compile says.
func (s *Service) keepStewardStatus(ctx context.Context, cur *store.Memo, idx *store.WorkflowIndex) error {
	if len(idx.Errors) > 0 {
		return nil
	}
	wf, err := s.store.WorkflowGetByMemoID(ctx, cur.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if len(wf.Errors) > 0 || wf.Status == idx.Status {
		return nil
	}
	before, errs := workflow.Compile([]byte(cur.Body), workflow.Options{MemoExists: func(string) bool { return true }})
	if len(errs) == 0 && before.Status == idx.Status {
		idx.Status = wf.Status
	}
	return nil
}

// PrepareDispatch fills in what a run's memo write must carry so that no
// workflow's index is left stale by it: the workflows naming the memo, and
// the memo's own index when a stub being updated is a workflow memo. The
// runner calls it when a settle is refused with store.ErrStaleCompile, which
// is rare (a workflow names the dispatched memo), so a dispatch costs
// nothing extra otherwise.
func (s *Service) PrepareDispatch(ctx context.Context, d *store.DispatchParams) error {
	switch {
	case d.Update != nil:
		cur, err := s.store.MemoGetByID(ctx, d.Update.ID)
		if err != nil {
			return err
		}
		return s.prepareUpdate(ctx, cur, d.Update)
	case d.Create != nil:
		return s.prepareCreate(ctx, d.Create)
	}
	return nil
}

// Reconcile re-indexes every workflow whose index does not match a compile
// against the library as it is: indexes written before the store kept the
// names workflows look up (and so left stale by earlier memo writes), or by
// a binary whose compiler said otherwise. It runs at start, before the
// runner; it reports how many workflows it re-indexed.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	var n int
	err := retryStale(func() error {
		srcs, err := s.store.WorkflowSourceList(ctx, &store.WorkflowSourceListParams{All: true})
		if err != nil {
			return err
		}
		v := s.view(ctx, "", "", false)
		var rs []*store.WorkflowRecompile
		for _, src := range srcs {
			r, err := s.reindex(v, src)
			if err != nil {
				return err
			}
			if !indexMatches(r.Index, src) {
				rs = append(rs, r)
			}
		}
		n = len(rs)
		return s.store.WorkflowReindex(ctx, rs)
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile workflow index: %w", err)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "re-indexed workflows against the library", slog.Int("workflows", n))
	}
	return n, nil
}

// indexMatches reports whether idx says what src's stored index says.
func indexMatches(idx *store.WorkflowIndex, src *store.WorkflowSource) bool {
	w := src.Workflow
	if idx.Command != w.Command || idx.Status != w.Status || idx.Summary != w.Summary || idx.Invoke != w.Invoke ||
		!slices.Equal(idx.Errors, w.Errors) {
		return false
	}
	// The store keeps names as it compares them, ignoring case.
	same := func(a, b string) bool { return store.NameMatchesMemo(a, "", b) }
	for _, n := range idx.Names {
		if !slices.ContainsFunc(src.Names, func(s string) bool { return same(n.Name, s) }) {
			return false
		}
	}
	for _, s := range src.Names {
		if !slices.ContainsFunc(idx.Names, func(n store.WorkflowName) bool { return same(n.Name, s) }) {
			return false
		}
	}
	return true
}

func commandOf(body string) string { return workflow.CommandOf([]byte(body)) }

// CreateParams are the fields a caller may set on a new memo.
type CreateParams struct {
	Title    string
	Body     string
	MemoType string
	Tags     []string
	Notes    string
	Unlisted bool
}

// MemoTypeNote is an ordinary memo: context memos, dispatched outputs, and
// whatever a caller creates without naming a type.
const MemoTypeNote = "note"

// MemoTypes are the memo types the product reads. Anything else would be
// stored but never listed under a type the console or engine knows, so it
// is refused rather than silently kept.
var MemoTypes = []string{MemoTypeNote, store.MemoTypeWorkflow}

func validMemoType(t string) error {
	if t == "" || slices.Contains(MemoTypes, t) {
		return nil
	}
	return store.Refuse(store.ErrInvalid, "memoType %q is not one of %s", t, strings.Join(MemoTypes, ", "))
}

func validate(title, body string) error {
	if strings.TrimSpace(title) == "" {
		return store.Refuse(store.ErrInvalid, "title is required")
	}
	if strings.TrimSpace(body) == "" {
		return store.Refuse(store.ErrInvalid, "body is required")
	}
	return nil
}

// checkLimits applies the shared input limits (SPEC §7) to the fields a
// write sets; nil fields are left as they are.
func checkLimits(title, body, notes *string, tags *[]string) error {
	if title != nil {
		if err := store.CheckName("title", *title); err != nil {
			return err
		}
	}
	if body != nil {
		if err := store.CheckMemoBody("body", *body); err != nil {
			return err
		}
	}
	if notes != nil {
		if err := store.CheckMemoBody("notes", *notes); err != nil {
			return err
		}
	}
	if tags != nil {
		return store.CheckTags("tags", *tags)
	}
	return nil
}

// Create stores a memo; workflow memos are compiled and indexed.
func (s *Service) Create(ctx context.Context, p CreateParams) (*store.Memo, error) {
	if err := validate(p.Title, p.Body); err != nil {
		return nil, err
	}
	if err := checkLimits(&p.Title, &p.Body, &p.Notes, &p.Tags); err != nil {
		return nil, err
	}
	if err := validMemoType(p.MemoType); err != nil {
		return nil, err
	}
	cp := &store.MemoCreateParams{Title: p.Title, Body: p.Body, MemoType: p.MemoType, Tags: p.Tags, Notes: p.Notes, Unlisted: p.Unlisted}
	var m *store.Memo
	err := retryStale(func() error {
		if err := s.prepareCreate(ctx, cp); err != nil {
			return err
		}
		var err error
		m, err = s.store.MemoCreate(ctx, cp)
		return err
	})
	return m, err
}

// UpdateParams is a compare-and-set update of a memo.
type UpdateParams struct {
	ID              string
	ExpectedVersion int64
	Title           *string
	Body            string
	Notes           *string
	Tags            *[]string
	Unlisted        *bool
}

// Update applies p if the memo is still at p.ExpectedVersion.
func (s *Service) Update(ctx context.Context, p UpdateParams) (*store.Memo, error) {
	if strings.TrimSpace(p.Body) == "" {
		return nil, store.Refuse(store.ErrInvalid, "body is required")
	}
	if p.Title != nil && strings.TrimSpace(*p.Title) == "" {
		return nil, store.Refuse(store.ErrInvalid, "title cannot be empty")
	}
	if err := checkLimits(p.Title, &p.Body, p.Notes, p.Tags); err != nil {
		return nil, err
	}
	up := &store.MemoUpdateParams{ID: p.ID, ExpectedVersion: p.ExpectedVersion, Title: p.Title, Body: &p.Body,
		Notes: p.Notes, Tags: p.Tags, Unlisted: p.Unlisted}
	var m *store.Memo
	err := retryStale(func() error {
		cur, err := s.store.MemoGetByID(ctx, p.ID)
		if err != nil {
			return err
		}
		if err := s.prepareUpdate(ctx, cur, up); err != nil {
			return err
		}
		m, err = s.store.MemoUpdate(ctx, up)
		return err
	})
	return m, err
}

// ImportWorkflow creates or updates the workflow memo for body's Command,
// or, for a draft that declares none, the workflow memo with its title,
// which makes imports idempotent. It reports whether it created.
func (s *Service) ImportWorkflow(ctx context.Context, title, body string) (*store.Memo, bool, error) {
	if title == "" {
		title = workflow.FirstHeading([]byte(body))
	}
	if title == "" {
		title = "Untitled workflow"
	}
	cur, err := s.importTarget(ctx, title, body)
	if errors.Is(err, store.ErrNotFound) {
		m, err := s.Create(ctx, CreateParams{Title: title, Body: body, MemoType: store.MemoTypeWorkflow})
		return m, err == nil, err
	} else if err != nil {
		return nil, false, err
	}
	if cur.Body == body && cur.Title == title {
		return cur, false, nil
	}
	m, err := s.Update(ctx, UpdateParams{ID: cur.ID, ExpectedVersion: cur.ContentVersion, Title: &title, Body: body})
	return m, false, err
}

// importTarget is the memo an import of body replaces: the workflow with
// its command, or, when it declares none, the workflow memo titled title
// that declares none either (a note of that title is left alone).
func (s *Service) importTarget(ctx context.Context, title, body string) (*store.Memo, error) {
	if cmd := commandOf(body); cmd != "" {
		w, err := s.store.WorkflowGetByCommand(ctx, cmd)
		if err != nil {
			return nil, err
		}
		return s.store.MemoGetByID(ctx, w.MemoID)
	}
	m, err := s.store.MemoGetByTitle(ctx, title)
	if err != nil {
		return nil, err
	}
	if m.MemoType != store.MemoTypeWorkflow || commandOf(m.Body) != "" {
		return nil, fmt.Errorf("no draft workflow titled %q: %w", title, store.ErrNotFound)
	}
	return m, nil
}

// SeedExamples imports the embedded example workflows and the context memos
// they load. Context memos are created only when no memo has their title, and
// workflows are imported only when their command is free, so a steward's
// edits survive restarts.
func (s *Service) SeedExamples(ctx context.Context) error {
	examples, err := workflow.ExampleMemos()
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	for _, ex := range examples {
		if ex.MemoType == store.MemoTypeWorkflow {
			if cmd := commandOf(ex.Body); cmd != "" {
				if _, err := s.store.WorkflowGetByCommand(ctx, cmd); err == nil {
					continue
				}
			}
			if _, _, err := s.ImportWorkflow(ctx, ex.Title, ex.Body); err != nil {
				return fmt.Errorf("seed workflow %q: %w", ex.Title, err)
			}
			s.log.InfoContext(ctx, "seeded example workflow", slog.String("title", ex.Title))
			continue
		}
		if _, err := s.store.MemoGetByTitle(ctx, ex.Title); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("seed memo %q: %w", ex.Title, err)
		}
		if _, err := s.Create(ctx, CreateParams{Title: ex.Title, Body: ex.Body, MemoType: ex.MemoType}); err != nil {
			return fmt.Errorf("seed memo %q: %w", ex.Title, err)
		}
	}
	return nil
}
