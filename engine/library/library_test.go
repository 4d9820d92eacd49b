package library_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

type testBundle struct {
	db  store.Store
	lib *library.Service
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.Open(t)
	return &testBundle{db: db, lib: library.New(db, nil)}
}

// wfDoc is a workflow memo declaring status and loading loads (each a
// "- **Gate** name" line); ¦ stands for a backtick.
func wfDoc(command, status string, loads ...string) string {
	doc := "# Workflow " + command + "\n\n## Trigger\n- **Command** ¦" + command + "¦\n- **Status** ¦" + status + "¦\n" +
		"- **Summary** test\n\n## Load Contract\n" + strings.Join(loads, "\n") + "\n\n## Steps\n1. **Context** Load.\n" +
		"2. **Process** Draft.\n   ¦¦¦prompt\n   {{.Payload.brief}}\n   ¦¦¦\n3. **Output** Dispatch.\n\n## Policy\n- **Approval** ¦auto¦\n"
	return strings.ReplaceAll(doc, "¦", "`")
}

func (b *testBundle) workflow(t *testing.T, command, status string, loads ...string) *store.Memo {
	t.Helper()
	m, err := b.lib.Create(context.Background(), library.CreateParams{Title: "Workflow " + command,
		Body: wfDoc(command, status, loads...), MemoType: store.MemoTypeWorkflow})
	require.NoError(t, err)
	return m
}

func (b *testBundle) note(t *testing.T, title string) *store.Memo {
	t.Helper()
	m, err := b.lib.Create(context.Background(), library.CreateParams{Title: title, Body: "body of " + title})
	require.NoError(t, err)
	return m
}

func (b *testBundle) retitle(t *testing.T, m *store.Memo, title string) *store.Memo {
	t.Helper()
	up, err := b.lib.Update(context.Background(), library.UpdateParams{ID: m.ID, ExpectedVersion: m.ContentVersion, Title: &title, Body: m.Body})
	require.NoError(t, err)
	return up
}

// requireIndexed checks a workflow's stored status and the lines its errors
// are on.
func (b *testBundle) requireIndexed(t *testing.T, wf *store.Memo, status string, errLines ...int) {
	t.Helper()
	w, err := b.db.WorkflowGetByMemoID(context.Background(), wf.ID)
	require.NoError(t, err)
	var lines []int
	for _, e := range w.Errors {
		lines = append(lines, e.Line)
	}
	require.Equal(t, status, w.Status, "status of %s (errors %v)", w.Command, w.Errors)
	require.Equal(t, errLines, lines, "error lines of %s: %v", w.Command, w.Errors)
}

// Lines of wfDoc's loads: the first load is on line 9.
const firstLoadLine = 9

// TestCompileStatusFollowsTheLibrary is SPEC §4.1: creating, retitling or
// changing a memo a workflow names (Gate or Hook, by title or id)
// recompiles every workflow naming it in the same write, so its status and
// errors are never stale.
func TestCompileStatusFollowsTheLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatingTheMissingMemos", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := b.workflow(t, "/w", "live", "- **Gate** Style guide", "- **Hook** House rules")
		b.requireIndexed(t, wf, "draft", firstLoadLine, firstLoadLine+1)
		b.note(t, "Style guide")
		b.requireIndexed(t, wf, "draft", firstLoadLine+1)
		b.note(t, "house RULES") // titles match ignoring case
		b.requireIndexed(t, wf, "live")
	})

	t.Run("ItReturnsToTheStatusItsMemoDeclares", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, status := range []string{"live", "paused", "draft"} {
			wf := b.workflow(t, "/w-"+status, status, "- **Gate** Gate for "+status)
			b.requireIndexed(t, wf, "draft", firstLoadLine)
			b.note(t, "Gate for "+status)
			b.requireIndexed(t, wf, status)
		}
	})

	t.Run("RetitlingTheGate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		gate := b.note(t, "Style guide")
		wf := b.workflow(t, "/w", "live", "- **Gate** Style guide")
		b.requireIndexed(t, wf, "live")
		gate = b.retitle(t, gate, "Style guide (old)")
		b.requireIndexed(t, wf, "draft", firstLoadLine)
		b.retitle(t, gate, "Style guide")
		b.requireIndexed(t, wf, "live")
	})

	t.Run("AnotherMemoStillAnswers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		gate := b.note(t, "Style guide")
		b.note(t, "STYLE GUIDE")
		wf := b.workflow(t, "/w", "live", "- **Gate** Style guide")
		b.retitle(t, gate, "Elsewhere")
		b.requireIndexed(t, wf, "live")
	})

	t.Run("NamedByID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		gate := b.note(t, "Style guide")
		wf := b.workflow(t, "/w", "live", "- **Hook** "+gate.ID)
		b.requireIndexed(t, wf, "live")
		b.retitle(t, gate, "Renamed")
		b.requireIndexed(t, wf, "live") // a memo named by id answers whatever its title
	})

	t.Run("EveryWorkflowNamingIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wfs []*store.Memo
		for i := range 3 {
			wfs = append(wfs, b.workflow(t, fmt.Sprint("/w", i), "live", "- **Gate** Style guide"))
		}
		gate := b.note(t, "Style guide")
		for _, wf := range wfs {
			b.requireIndexed(t, wf, "live")
		}
		b.retitle(t, gate, "Gone")
		for _, wf := range wfs {
			b.requireIndexed(t, wf, "draft", firstLoadLine)
		}
	})

	t.Run("AStewardsPauseSurvivesAnEditOfTheGate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		gate := b.note(t, "Style guide")
		wf := b.workflow(t, "/w", "live", "- **Gate** Style guide")
		_, err := b.db.WorkflowStatusSet(ctx, wf.ID, "paused")
		require.NoError(t, err)
		_, err = b.lib.Update(ctx, library.UpdateParams{ID: gate.ID, ExpectedVersion: gate.ContentVersion, Body: "a new style"})
		require.NoError(t, err)
		b.requireIndexed(t, wf, "paused")
	})

	// An edit of the workflow's own memo that leaves its Status line as it
	// was keeps a steward's pause (or resume); one that changes the line
	// is the author's say, and so is a memo that compiles again.
	t.Run("AStewardsPauseSurvivesAnEditOfItsOwnMemo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := b.workflow(t, "/w", "live")
		_, err := b.db.WorkflowStatusSet(ctx, wf.ID, "paused")
		require.NoError(t, err)
		edit := func(body string) {
			t.Helper()
			cur, err := b.db.MemoGetByID(ctx, wf.ID)
			require.NoError(t, err)
			_, err = b.lib.Update(ctx, library.UpdateParams{ID: wf.ID, ExpectedVersion: cur.ContentVersion, Body: body})
			require.NoError(t, err)
		}
		edit(strings.Replace(wfDoc("/w", "live"), "Draft.", "Draft it well.", 1))
		b.requireIndexed(t, wf, "paused")
		edit(wfDoc("/w", "draft"))
		b.requireIndexed(t, wf, "draft")
		edit(wfDoc("/w", "live"))
		b.requireIndexed(t, wf, "live")
	})
}

// TestConcurrentWritesNeverLeaveItStale: memo writes that each change what
// one workflow's names answer, committed at once, still leave its index as a
// compile against the final library says. Each write checks, as it commits,
// that what it compiled saw the library it leaves, and is recompiled and
// tried again if not.
func TestConcurrentWritesNeverLeaveItStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rounds, names = 8, 4
	for _, tc := range []struct {
		name string
		// writes returns the writes to race and the workflow's memo id once
		// they are done.
		writes func(b *testBundle, r int) (writes []func() error, workflow func() string)
	}{
		{name: "TheMemosItNamesAppearAtOnce", writes: func(b *testBundle, r int) ([]func() error, func() string) {
			var loads []string
			for i := range names {
				loads = append(loads, fmt.Sprintf("- **Gate** Round %d memo %d", r, i))
			}
			wf := b.workflow(t, fmt.Sprint("/w", r), "live", loads...)
			var ws []func() error
			for i := range names {
				ws = append(ws, func() error {
					_, err := b.lib.Create(ctx, library.CreateParams{Title: fmt.Sprintf("Round %d memo %d", r, i), Body: "b"})
					return err
				})
			}
			return ws, func() string { return wf.ID }
		}},
		{name: "TheWorkflowAndItsGateAppearAtOnce", writes: func(b *testBundle, r int) ([]func() error, func() string) {
			var id string
			return []func() error{
					func() error {
						m, err := b.lib.Create(ctx, library.CreateParams{Title: fmt.Sprint("Workflow ", r),
							Body: wfDoc(fmt.Sprint("/w", r), "live", fmt.Sprint("- **Gate** Gate ", r)), MemoType: store.MemoTypeWorkflow})
						if err == nil {
							id = m.ID
						}
						return err
					},
					func() error {
						_, err := b.lib.Create(ctx, library.CreateParams{Title: fmt.Sprint("Gate ", r), Body: "b"})
						return err
					},
				}, func() string {
					return id
				}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for r := range rounds {
				writes, wf := tc.writes(b, r)
				errs := make(chan error, len(writes))
				start := make(chan struct{})
				for _, w := range writes {
					go func() {
						<-start
						errs <- w()
					}()
				}
				close(start)
				for range writes {
					require.NoError(t, <-errs)
				}
				b.requireIndexed(t, &store.Memo{ID: wf()}, "live")
			}
		})
	}
}

// TestReconcileHealsAStaleIndex: an index written before the store kept the
// names workflows look up (here written straight to the store: draft, with a
// Gate error, though the Gate exists) is re-indexed at start, once.
func TestReconcileHealsAStaleIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.note(t, "Style guide")
	fresh := b.workflow(t, "/fresh", "live", "- **Gate** Style guide")
	stale, err := b.db.MemoCreate(ctx, &store.MemoCreateParams{Title: "Stale", Body: wfDoc("/stale", "live", "- **Gate** Style guide"),
		MemoType: store.MemoTypeWorkflow, Workflow: &store.WorkflowIndex{Command: "/stale", Status: "draft",
			Errors: []store.CompileError{{Line: firstLoadLine, Message: `Gate memo "Style guide" does not exist`}}}})
	require.NoError(t, err)
	b.requireIndexed(t, stale, "draft", firstLoadLine)

	n, err := b.lib.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the stale index is rewritten")
	b.requireIndexed(t, stale, "live")
	b.requireIndexed(t, fresh, "live")
	n, err = b.lib.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a reconciled library needs nothing")

	// Its names are now known: retitling the Gate recompiles it.
	gate, err := b.db.MemoGetByTitle(ctx, "Style guide")
	require.NoError(t, err)
	b.retitle(t, gate, "Gone")
	b.requireIndexed(t, stale, "draft", firstLoadLine)
}

// TestCompileMemoIsAFreshCompile: the cached parse answers exactly what a
// compile of the current library would — the same manifest while the named
// memos exist, and the compile's own line-numbered error once one is gone.
func TestCompileMemoIsAFreshCompile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	gate := b.note(t, "Style guide")
	wf := b.workflow(t, "/w", "live", "- **Gate** Style guide")

	fresh, want := b.lib.Compile(ctx, wf.Body)
	require.Empty(t, want)
	for range 2 { // a miss, then a hit
		got, raw, errs := b.lib.CompileMemo(ctx, wf)
		require.Empty(t, errs)
		require.Equal(t, fresh, got)
		require.JSONEq(t, string(mustJSON(t, fresh)), string(raw))
	}

	b.retitle(t, gate, "Old style guide")
	_, _, errs := b.lib.CompileMemo(ctx, wf)
	_, want = b.lib.Compile(ctx, wf.Body)
	require.NotEmpty(t, errs, "a Gate that no longer answers is a compile error, cached parse or not")
	require.Equal(t, want, errs)
	require.Equal(t, firstLoadLine, errs[0].Line)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestImportWorkflowIdempotent: importing the same file twice leaves one
// workflow memo, whether the file declares a Command (matched by it) or not
// (a draft without one is matched by its title).
func TestImportWorkflowIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ name, body string }{
		{"WithCommand", "# Heron count\n\n## Trigger\n- **Command** /heron-count\n\n## Steps\n1. **Output** Count the herons.\n"},
		{"WithoutCommand", "# Heron draft\n\n## Steps\n1. **Output** Count the herons.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			first, created, err := b.lib.ImportWorkflow(ctx, "", tc.body)
			require.NoError(t, err)
			require.True(t, created)
			again, created, err := b.lib.ImportWorkflow(ctx, "", tc.body)
			require.NoError(t, err)
			require.False(t, created, "the second import finds the first")
			require.Equal(t, first.ID, again.ID)
			edited, created, err := b.lib.ImportWorkflow(ctx, "", tc.body+"\nMore.\n")
			require.NoError(t, err)
			require.False(t, created, "an edited file updates the memo")
			require.Equal(t, first.ID, edited.ID)
			require.Equal(t, int64(2), edited.ContentVersion)
		})
	}
}
