// Package library is the memo library's service: every memo write goes
// through it so that workflow memos are compiled and their index row is
// written in the same transaction as the memo.
package library

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// ErrInvalid marks input a caller must fix (a 400 at the API): the store's
// sentinel, which the shared input limits wrap too.
var ErrInvalid = store.ErrInvalid

// Service writes and reads memos.
type Service struct {
	store store.Store
	log   *slog.Logger
}

// New returns a library service over s.
func New(s store.Store, log *slog.Logger) *Service {
	return &Service{store: s, log: log}
}

// Compile compiles a workflow memo body against the current library, so
// Gate and Hook names are checked against memos that exist now.
func (s *Service) Compile(ctx context.Context, body string) (*workflow.Manifest, workflow.Errors) {
	return workflow.Compile([]byte(body), workflow.Options{MemoExists: func(name string) bool {
		return s.exists(ctx, name)
	}})
}

func (s *Service) exists(ctx context.Context, name string) bool {
	if _, err := s.store.MemoGetByTitle(ctx, name); err == nil {
		return true
	}
	_, err := s.store.MemoGetByID(ctx, name)
	return err == nil
}

// index compiles body and returns the index row to write with the memo.
func (s *Service) index(ctx context.Context, body string) *store.WorkflowIndex {
	m, errs := s.Compile(ctx, body)
	if len(errs) > 0 {
		idx := &store.WorkflowIndex{Status: workflow.StatusDraft}
		for _, e := range errs {
			idx.Errors = append(idx.Errors, store.CompileError{Line: e.Line, Message: e.Message})
		}
		// A broken memo still claims its command when the Trigger names one,
		// so the listing shows its errors under the command authors know.
		if cmd := commandOf(body); cmd != "" {
			idx.Command = cmd
		}
		return idx
	}
	return &store.WorkflowIndex{Command: m.Command, Status: m.Status, Summary: m.Summary, Invoke: m.Invoke}
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
	return fmt.Errorf("%w: memoType %q is not one of %s", ErrInvalid, t, strings.Join(MemoTypes, ", "))
}

func validate(title, body string) error {
	if strings.TrimSpace(title) == "" {
		return fmt.Errorf("%w: title is required", ErrInvalid)
	}
	if strings.TrimSpace(body) == "" {
		return fmt.Errorf("%w: body is required", ErrInvalid)
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
	if p.MemoType == store.MemoTypeWorkflow {
		cp.Workflow = s.index(ctx, p.Body)
	}
	return s.store.MemoCreate(ctx, cp)
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
		return nil, fmt.Errorf("%w: body is required", ErrInvalid)
	}
	if p.Title != nil && strings.TrimSpace(*p.Title) == "" {
		return nil, fmt.Errorf("%w: title cannot be empty", ErrInvalid)
	}
	if err := checkLimits(p.Title, &p.Body, p.Notes, p.Tags); err != nil {
		return nil, err
	}
	cur, err := s.store.MemoGetByID(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	up := &store.MemoUpdateParams{ID: p.ID, ExpectedVersion: p.ExpectedVersion, Title: p.Title, Body: &p.Body,
		Notes: p.Notes, Tags: p.Tags, Unlisted: p.Unlisted}
	if cur.MemoType == store.MemoTypeWorkflow {
		up.Workflow = s.index(ctx, p.Body)
	}
	return s.store.MemoUpdate(ctx, up)
}

// ImportWorkflow creates or updates the workflow memo for body's Command,
// which makes imports idempotent by command. It reports whether it created.
func (s *Service) ImportWorkflow(ctx context.Context, title, body string) (*store.Memo, bool, error) {
	if title == "" {
		title = workflow.FirstHeading([]byte(body))
	}
	if title == "" {
		title = "Untitled workflow"
	}
	if cmd := commandOf(body); cmd != "" {
		if w, err := s.store.WorkflowGetByCommand(ctx, cmd); err == nil {
			cur, err := s.store.MemoGetByID(ctx, w.MemoID)
			if err != nil {
				return nil, false, err
			}
			if cur.Body == body && cur.Title == title {
				return cur, false, nil
			}
			m, err := s.Update(ctx, UpdateParams{ID: cur.ID, ExpectedVersion: cur.ContentVersion, Title: &title, Body: body})
			return m, false, err
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, false, err
		}
	}
	m, err := s.Create(ctx, CreateParams{Title: title, Body: body, MemoType: store.MemoTypeWorkflow})
	return m, err == nil, err
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
