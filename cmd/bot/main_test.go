package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

// syncBuffer lets the test read what the service printed while it runs.
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

var listenRe = regexp.MustCompile(`listening on (http://\S+)`)

// startServe runs `bot serve` in-process on a free port and returns its URL
// and what it printed; the service stops when the test ends.
func startServe(t *testing.T, env map[string]string, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), env, strings.NewReader(""), out, &syncBuffer{})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "serve shuts down cleanly")
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	var url string
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v", err)
		default:
		}
		m := listenRe.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 20*time.Second, 10*time.Millisecond)
	return url, out
}

func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut syncBuffer
	err := run(context.Background(), args, env, strings.NewReader(stdin), &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestServeFirstStart(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "holdfast.db")
	url, out := startServe(t, map[string]string{"HOLDFAST_DB": db})

	require.Regexp(t, `Created user admin with password \S{16,}`, out.String(), "first start prints the generated admin password once")
	require.Equal(t, http.StatusOK, bottest.JSON(t, http.MethodGet, url+"/healthz", "", nil, nil))

	keyOut, err := runCLI(t, map[string]string{"HOLDFAST_DB": db}, "", "apikey", "create", "--name", "test", "--role", "viewer")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(keyOut), "\n")
	key := lines[len(lines)-1]

	var wf struct {
		Workflows []struct {
			Command string
			Errors  []any
		}
	}
	require.Equal(t, http.StatusOK, bottest.JSON(t, http.MethodGet, url+"/api/workflows", key, nil, &wf))
	var commands []string
	for _, w := range wf.Workflows {
		require.Empty(t, w.Errors, w.Command)
		commands = append(commands, w.Command)
	}
	require.Subset(t, commands, []string{"/draft-memo", "/summarize-thread", "/weekly-digest"})

	// Keys are listed (never themselves, only what they are) and revoked,
	// which the running server honours at the next request.
	list, err := runCLI(t, map[string]string{"HOLDFAST_DB": db}, "", "apikey", "list")
	require.NoError(t, err)
	id := regexp.MustCompile(`key_[a-z0-9]+`).FindString(list)
	require.NotEmpty(t, id, list)
	require.Contains(t, list, "test")
	require.Contains(t, list, "viewer")
	require.NotContains(t, list, key)
	revokedOut, err := runCLI(t, map[string]string{"HOLDFAST_DB": db}, "", "apikey", "revoke", id)
	require.NoError(t, err)
	require.Contains(t, revokedOut, "revoked API key test ("+id+")")
	require.Equal(t, http.StatusUnauthorized, bottest.JSON(t, http.MethodGet, url+"/api/workflows", key, nil, nil))
	list, err = runCLI(t, map[string]string{"HOLDFAST_DB": db}, "", "apikey", "list")
	require.NoError(t, err)
	row := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[1])
	require.Equal(t, id, row[0])
	require.NotEqual(t, "-", row[len(row)-1], "the key's row says when it was revoked")
	_, err = runCLI(t, map[string]string{"HOLDFAST_DB": db}, "", "apikey", "revoke", "key_nope")
	require.ErrorContains(t, err, "no API key key_nope")
}

func TestServeRestartKeepsAdminAndSeedsOnce(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "holdfast.db")
	env := map[string]string{"HOLDFAST_DB": db, "HOLDFAST_ADMIN_PASSWORD": "correct horse battery"}
	_, out := startServe(t, env)
	require.NotContains(t, out.String(), "Created user admin with password", "a chosen password is never printed")

	_, err := runCLI(t, env, "", "workflow", "import", "../../engine/workflow/examples")
	require.NoError(t, err)
	keyOut, err := runCLI(t, env, "", "apikey", "create", "--name", "t", "--role", "admin")
	require.NoError(t, err)
	key := strings.TrimSpace(keyOut[strings.LastIndex(strings.TrimSpace(keyOut), "\n")+1:])
	url2, _ := startServe(t, map[string]string{"HOLDFAST_DB": db, "HOLDFAST_ADDR": "127.0.0.1:0"})
	var wf struct{ Workflows []struct{ Command string } }
	require.Equal(t, http.StatusOK, bottest.JSON(t, http.MethodGet, url2+"/api/workflows", key, nil, &wf))
	require.Len(t, wf.Workflows, 3, "re-seeding and re-importing are idempotent by command")
}

func TestCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"HOLDFAST_DB": filepath.Join(dir, "cli.db")}
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("s3cret-password\nignored\n"), 0o600))

	for _, tc := range []struct {
		name    string
		stdin   string
		args    []string
		wantErr string
		wantOut string
	}{
		{"Migrate", "", []string{"migrate"}, "", "schema version"},
		{"UserAdd", "", []string{"user", "add", "--username", "ada", "--password-file", pw, "--role", "steward", "--slack-user", "U1"}, "", "created user ada"},
		{"UserAddStdin", "another-password\n", []string{"user", "add", "--username", "bob", "--password-file", "-"}, "", "role viewer"},
		{"UserAddDuplicate", "", []string{"user", "add", "--username", "ada", "--password-file", pw}, "a user named ada already exists", ""},
		{"UserAddTakenSlackUser", "", []string{"user", "add", "--username", "eve", "--password-file", pw, "--slack-user", "U1"}, "the Slack user U1 is already taken", ""},
		{"UserAddBadSlackUser", "", []string{"user", "add", "--username", "fay", "--password-file", pw, "--slack-user", "not a slack id"}, "Slack user id", ""},
		{"UserAddBadRole", "", []string{"user", "add", "--username", "cy", "--password-file", pw, "--role", "root"}, "role must be", ""},
		{"UserAddShortPassword", "short\n", []string{"user", "add", "--username", "dee", "--password-file", "-"}, "at least 8", ""},
		{"APIKeyNeedsName", "", []string{"apikey", "create"}, "--name", ""},
		{"ImportMissingFile", "", []string{"workflow", "import", filepath.Join(dir, "nope.md")}, "no such file", ""},
		{"UnknownCommand", "", []string{"frobnicate"}, "unknown command", ""},
		{"BadEnv", "", []string{"migrate", "--workers", "0"}, "workers", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, env, tc.stdin, tc.args...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err, out)
			require.Contains(t, out, tc.wantOut)
		})
	}
}

// TestWorkflowImportFailsOnMemosThatDoNotCompile is SPEC §8: `bot workflow
// import` exits non-zero when a memo does not compile, still imports it as
// a draft, and prints its errors with line numbers.
func TestWorkflowImportFailsOnMemosThatDoNotCompile(t *testing.T) {
	t.Parallel()
	good := strings.ReplaceAll(crashWorkflow, "¦", "`")
	badGate := strings.Replace(good, "## Load Contract\n", "## Load Contract\n- **Gate** No such memo\n", 1)
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string
		// drafts are the commands that must be imported as drafts.
		drafts []string
		lines  []string
	}{
		{name: "AllCompile", files: map[string]string{"good.md": good}},
		{name: "BrokenPolicy", files: map[string]string{"good.md": good, "broken.md": brokenWorkflow},
			wantErr: "1 of 2 memos do not compile", drafts: []string{"/broken-probe"}, lines: []string{`broken\.md:\d+: .*worktree`}},
		{name: "MissingGate", files: map[string]string{"gate.md": strings.Replace(badGate, "/crash-draft", "/gate-draft", 1)},
			wantErr: "1 of 1 memos do not compile", drafts: []string{"/gate-draft"}, lines: []string{`gate\.md:9: Gate memo "No such memo" does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := map[string]string{"HOLDFAST_DB": filepath.Join(dir, "h.db")}
			wf := filepath.Join(dir, "wf")
			require.NoError(t, os.MkdirAll(wf, 0o755))
			for name, body := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(wf, name), []byte(body), 0o600))
			}
			for _, run := range []string{"first", "again"} {
				out, err := runCLI(t, env, "", "workflow", "import", wf)
				if tc.wantErr == "" {
					require.NoError(t, err, "%s: %s", run, out)
					continue
				}
				require.ErrorContains(t, err, tc.wantErr, "%s: %s", run, out)
				for _, l := range tc.lines {
					require.Regexp(t, l, out, run)
				}
			}
			db, err := openStore(context.Background(), &config{DB: env["HOLDFAST_DB"]})
			require.NoError(t, err)
			defer db.Close()
			list, err := db.WorkflowList(context.Background())
			require.NoError(t, err)
			require.Len(t, list, len(tc.files), "every memo is imported, broken or not")
			for _, w := range list {
				if slices.Contains(tc.drafts, w.Command) {
					require.Equal(t, "draft", w.Status, w.Command)
					require.NotEmpty(t, w.Errors, w.Command)
				} else {
					require.Equal(t, "live", w.Status, w.Command)
				}
			}
		})
	}
}

// TestUserPasswd: `bot user passwd` sets a user's password from a file or
// stdin and ends their console sign-ins (the way back in for a lost admin
// password).
func TestUserPasswd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "passwd.db")
	env := map[string]string{"HOLDFAST_DB": path}
	out, err := runCLI(t, env, "old-password\n", "user", "add", "--username", "root", "--password-file", "-", "--role", "admin")
	require.NoError(t, err, out)

	db, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	u, err := db.UserGetByUsername(ctx, "root")
	require.NoError(t, err)
	_, err = db.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: "cs-old", SecretHash: "h", UserID: u.ID, CSRFToken: "t",
		ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	pw := filepath.Join(dir, "new")
	require.NoError(t, os.WriteFile(pw, []byte("brand-new-password\n"), 0o600))
	for _, tc := range []struct {
		name    string
		stdin   string
		args    []string
		wantErr string
	}{
		{"UnknownUser", "", []string{"--username", "nobody", "--password-file", pw}, `no user is named "nobody"`},
		{"ShortPassword", "short\n", []string{"--username", "root", "--password-file", "-"}, "at least 8"},
		{"NeedsBothFlags", "", []string{"--username", "root"}, "--password-file"},
		{"FromFile", "", []string{"--username", "root", "--password-file", pw}, ""},
	} {
		out, err := runCLI(t, env, tc.stdin, append([]string{"user", "passwd"}, tc.args...)...)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.name)
			continue
		}
		require.NoError(t, err, out)
		require.Contains(t, out, "set the password of root", tc.name)
	}

	db, err = sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	defer db.Close()
	u, err = db.UserGetByUsername(ctx, "root")
	require.NoError(t, err)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte("brand-new-password")), "the new password signs in")
	require.Error(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte("old-password")), "the old one no longer does")
	_, err = db.ConsoleSessionGetByID(ctx, "cs-old")
	require.ErrorIs(t, err, store.ErrNotFound, "the old sign-ins have ended")
}
