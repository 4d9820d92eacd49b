package web_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

const noChromium = "chromium is not installed; install it (apt-get install chromium) to run the browser tests"

// skipped collects the tests that skipped for a missing tool, so the run can
// say so once: go test prints nothing of a passing package, and a green run
// must not look complete when a suite did not run.
type skipped struct {
	mu    sync.Mutex
	names []string
}

var browserSkips skipped

func (s *skipped) add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
}

// note is the one line a skipped suite leaves, or "".
func (s *skipped) note(pkg, why string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d browser tests skipped (%s): %s", pkg, len(s.names), strings.Join(s.names, ", "), why)
}

// TestMain prints the skip note to stderr (shown by go test -v, or when the
// package fails) and appends it to the file HOLDFAST_TEST_NOTES names, which
// `make test` prints after the package results.
func TestMain(m *testing.M) {
	code := m.Run()
	if line := browserSkips.note("console/web", noChromium); line != "" {
		fmt.Fprintln(os.Stderr, line)
		if path := os.Getenv("HOLDFAST_TEST_NOTES"); path != "" {
			if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintln(f, line)
				f.Close()
			}
		}
	}
	os.Exit(code)
}
