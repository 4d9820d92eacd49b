// Package bottest runs the real bot binary in tests, as the crash and
// replica tests of several packages need it: built once per test process,
// started as `bot serve` on a free port, stopped with a signal or SIGKILL.
package bottest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The binary, built once per test process: a build costs more than most
// tests that use it.
var built struct {
	once sync.Once
	dir  string
	bin  string
	out  []byte
	err  error
}

// Binary builds cmd/bot with the project's tags and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "holdfast-bot-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "bot")
		build := exec.Command("go", "build", "-tags", "sqlite_fts5", "-o", built.bin, "github.com/holdfast-bot/holdfast/cmd/bot")
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		built.out, built.err = build.CombinedOutput()
	})
	require.NoError(t, built.err, string(built.out))
	return built.bin
}

// Cleanup removes the build; a package's TestMain calls it after its tests.
func Cleanup() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// Proc is a running `bot serve`.
type Proc struct {
	URL  string
	Cmd  *exec.Cmd
	exit chan struct{} // closed when the process has exited
	err  error         // its exit, once exit is closed
	log  *syncBuffer
}

// Start runs `bin serve` on a free port with env and waits until it
// listens; one still running when the test ends is killed.
func Start(t testing.TB, bin string, env []string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &Proc{Cmd: cmd, exit: make(chan struct{}), log: &syncBuffer{}}
	cmd.Stderr = p.log
	require.NoError(t, cmd.Start())
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	go func() { p.err = cmd.Wait(); close(p.exit) }()
	t.Cleanup(func() {
		select {
		case <-p.exit:
		default:
			_ = cmd.Process.Kill()
			<-p.exit
		}
	})
	select {
	case p.URL = <-urls:
	case <-p.exit:
		t.Fatalf("serve exited early: %v\n%s", p.err, p.Log())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("serve did not start")
	}
	return p
}

// Kill stops the process with SIGKILL (no cleanup of any kind) and waits
// for it to be gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Kill())
	<-p.exit
}

// Stop interrupts the process, as an operator's Ctrl-C does, and requires
// a clean shutdown within 30 s.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.exit:
		require.NoError(t, p.err, "serve shuts down cleanly\n%s", p.Log())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exit }

// Log is what the process wrote to stderr so far.
func (p *Proc) Log() string { return p.log.String() }

// syncBuffer is written by exec's copier and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CLI runs the binary with env and answers its combined output; a failing
// command fails t with that output.
func CLI(t testing.TB, bin string, env []string, args ...string) string {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Env = env
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%v\n%s", args, out)
	return string(out)
}

// AdminKey creates an admin API key named name with the CLI and answers it
// (the last line the command prints).
func AdminKey(t testing.TB, bin string, env []string, name string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(CLI(t, bin, env, "apikey", "create", "--name", name, "--role", "admin")), "\n")
	return lines[len(lines)-1]
}

// JSON sends a request to the binary's API with in as its JSON body (none
// when nil) and the bearer key (none when empty), decodes a 2xx answer into
// out (when not nil) and answers the status.
func JSON(t testing.TB, method, url, key string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}
