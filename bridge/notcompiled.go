package bridge

import (
	"fmt"
	"strings"

	"github.com/holdfast-bot/holdfast/engine"
)

// NotCompiledError is what Engine.Enqueue returns (it also wraps
// store.ErrConflict) when the workflow's memo does not compile: the
// engine's, carrying the first compile error and the workflow's memo id.
type NotCompiledError = engine.NotCompiledError

// notCompiledText answers an enqueue of a workflow that does not compile:
// its first error with its line, and a link to the workflow's console page,
// which shows every error next to the memo source.
func (b *Bridge) notCompiledText(name string, e *NotCompiledError) string {
	more := ""
	if n := e.Count - 1; n == 1 {
		more = " (and 1 more error)"
	} else if n > 1 {
		more = fmt.Sprintf(" (and %d more errors)", n)
	}
	return fmt.Sprintf(":warning: Workflow `%s` does not compile, so it takes no work until it is fixed. Line %d: %s%s. See <%s/workflows/%s|its workflow page>.",
		esc(name), e.First.Line, esc(strings.TrimSuffix(e.First.Message, ".")), more, b.cfg.BaseURL, e.MemoID)
}
