package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The real binary, built once per test run and shared by the tests that
// start it as a process (a build costs more than most tests here).
var built struct {
	once sync.Once
	dir  string
	bin  string
	out  []byte
	err  error
}

// botBinary builds ./cmd/bot with the project's tags and returns its path.
func botBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "holdfast-bot-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "bot")
		build := exec.Command("go", "build", "-tags", "sqlite_fts5", "-o", built.bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		built.out, built.err = build.CombinedOutput()
	})
	require.NoError(t, built.err, string(built.out))
	return built.bin
}

// removeBinary deletes the shared build; TestMain calls it after every test.
func removeBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
