package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

// parse builds a flag set with every setting flag plus the command's own
// and parses args. Asked for help (-h, --help), it prints the command's help
// to stdout and returns errHelpShown; a bad flag is an error naming the
// command's help.
func parse(name string, args []string, env map[string]string, stdout io.Writer, own func(fs *flag.FlagSet)) (*config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help is printHelp's
	var c config
	check := c.register(fs, env)
	if own != nil {
		own(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, name, own)
			return nil, nil, errHelpShown
		}
		return nil, nil, fmt.Errorf("%s: %w (run 'bot help %s' for its flags)", name, err, name)
	}
	if err := check(); err != nil {
		return nil, nil, err
	}
	return &c, fs, nil
}

// printHelp is a command's help: synopsis, what it does, its own flags and
// the settings it reads, with their built-in defaults (never the values in
// the environment, which may be secrets).
func printHelp(w io.Writer, name string, own func(fs *flag.FlagSet)) {
	cmd, _ := commandByName(name)
	fmt.Fprintf(w, "usage: bot %s %s\n\n%s.\n", name, cmd.args, upperFirst(cmd.summary))
	if cmd.about != "" {
		fmt.Fprintln(w, cmd.about)
	}
	if own != nil {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		own(fs)
		fmt.Fprint(w, "\nflags:\n")
		printFlags(w, fs, nil)
	}
	var c config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c.register(fs, nil)
	var keep map[string]bool
	if cmd.settings != nil {
		keep = map[string]bool{}
		for _, s := range cmd.settings {
			keep[s] = true
		}
	}
	fmt.Fprint(w, "\nsettings (each is a flag and the environment variable named; a flag wins):\n")
	printFlags(w, fs, keep)
}

// printFlags prints fs's flags (those in keep, when keep is not nil) in the
// flag package's layout, with two dashes, as users type them.
func printFlags(w io.Writer, fs *flag.FlagSet, keep map[string]bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if keep != nil && !keep[f.Name] {
			return
		}
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		line += "\n    \t" + usage
		switch f.DefValue {
		case "", "0", "0s":
		default:
			if typ == "string" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += " (default " + f.DefValue + ")"
			}
		}
		fmt.Fprintln(w, line)
	})
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// installCommand builds bot with the tag its SQLite needs; the README gives
// the same line.
const installCommand = "go install -tags sqlite_fts5 github.com/holdfast-bot/holdfast/cmd/bot@latest"

// openStore opens the store HOLDFAST_DB names: PostgreSQL for a
// postgres:// or postgresql:// URL (SPEC §9), else a SQLite file.
func openStore(ctx context.Context, c *config) (store.Store, error) {
	if postgres.IsURL(c.DB) {
		db, err := postgres.Open(ctx, postgres.Config{URL: c.DB})
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", redactDB(c.DB), err)
		}
		return db, nil
	}
	db, err := explainStoreError(sqlite.Open(ctx, sqlite.Config{Path: c.DB, Sync: c.DBSync}))
	if err != nil {
		return nil, err
	}
	return db, nil
}

// redactDB is HOLDFAST_DB as logs and messages may show it: a URL's
// password is masked.
func redactDB(dsn string) string {
	if !postgres.IsURL(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

// schemaVersion is the newest migration this binary knows for HOLDFAST_DB's store.
func schemaVersion(dsn string) int {
	if postgres.IsURL(dsn) {
		return postgres.SchemaVersion()
	}
	return sqlite.SchemaVersion()
}

// explainStoreError turns a build without FTS5 (a plain `go install …@latest`
// drops the tag the Makefile sets) into the command that builds a working
// binary.
func explainStoreError(db *sqlite.DB, err error) (*sqlite.DB, error) {
	if errors.Is(err, sqlite.ErrNoFTS5) {
		return nil, fmt.Errorf("this binary was built without SQLite's FTS5, which Holdfast needs; build it with the sqlite_fts5 tag:\n\n    %s\n\n(in a clone of the repository, make build does the same)", installCommand)
	}
	return db, err
}

// newLogger logs text lines to w; a line logged inside a span carries its
// trace_id and span_id.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(tracing.LogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
}

func cmdMigrate(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, _, err := parse("migrate", args, env, stdout, nil)
	if err != nil {
		return err
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s is at schema version %d\n", redactDB(c.DB), schemaVersion(c.DB))
	return db.Close()
}

func cmdUserAdd(ctx context.Context, args []string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	var username, pwFile, role, slackUser string
	c, _, err := parse("user add", args, env, stdout, func(fs *flag.FlagSet) {
		fs.StringVar(&username, "username", "", "user name")
		fs.StringVar(&pwFile, "password-file", "", "file whose first line is the password, or - for stdin")
		fs.StringVar(&role, "role", store.RoleViewer, "viewer, steward or admin")
		fs.StringVar(&slackUser, "slack-user", "", "linked Slack user id (UXXXX)")
	})
	if err != nil {
		return err
	}
	if username == "" || pwFile == "" {
		return errors.New("user add: --username and --password-file are required")
	}
	if err := store.CheckUsername(username); err != nil {
		return fmt.Errorf("user add: %w", err)
	}
	if !store.ValidRole(role) {
		return fmt.Errorf("user add: role must be viewer, steward or admin, got %q", role)
	}
	if err := store.CheckSlackUserID(slackUser); err != nil {
		return fmt.Errorf("user add: --slack-user: %s", store.ReasonOf(err))
	}
	password, err := readPassword(pwFile, stdin)
	if err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("user add: %w", err)
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := db.UserCreate(ctx, &store.User{Username: username, PasswordHash: string(hash), Role: role, SlackUserID: slackUser})
	switch {
	case errors.Is(err, store.ErrConflict) && slackUser != "":
		return fmt.Errorf("user add: the username %s or the Slack user %s is already taken", username, slackUser)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("user add: a user named %s already exists (bot user passwd sets a new password)", username)
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "created user %s (%s) with role %s\n", u.Username, u.ID, u.Role)
	return nil
}

// cmdUserPasswd sets a user's password from a file or stdin: the way back
// in for a lost admin password. It ends the user's console sign-ins.
func cmdUserPasswd(ctx context.Context, args []string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	var username, pwFile string
	c, _, err := parse("user passwd", args, env, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&username, "username", "", "user name")
		fs.StringVar(&pwFile, "password-file", "", "file whose first line is the password, or - for stdin")
	})
	if err != nil {
		return err
	}
	if username == "" || pwFile == "" {
		return errors.New("user passwd: --username and --password-file are required")
	}
	password, err := readPassword(pwFile, stdin)
	if err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("user passwd: %w", err)
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	u, err := db.UserGetByUsername(ctx, username)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("user passwd: no user is named %q", username)
	} else if err != nil {
		return err
	}
	if _, err := db.UserPasswordSet(ctx, u.ID, string(hash)); err != nil {
		return err
	}
	note := ""
	if u.Disabled {
		note = "; the user is disabled: an admin must enable them before they can sign in"
	}
	fmt.Fprintf(stdout, "set the password of %s (%s); their console sign-ins have ended%s\n", u.Username, u.ID, note)
	return nil
}

func readPassword(file string, stdin io.Reader) (string, error) {
	var r io.Reader = stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("password file: %w", err)
		}
		defer f.Close()
		r = f
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("password file: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) < 8 {
		return "", errors.New("password must be at least 8 characters")
	}
	return line, nil
}

func cmdAPIKeyCreate(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	var name, role string
	c, _, err := parse("apikey create", args, env, stdout, func(fs *flag.FlagSet) {
		fs.StringVar(&name, "name", "", "what the key is for")
		fs.StringVar(&role, "role", store.RoleViewer, "viewer, steward or admin")
	})
	if err != nil {
		return err
	}
	if name == "" {
		return errors.New("apikey create: --name is required")
	}
	if !store.ValidRole(role) {
		return fmt.Errorf("apikey create: role must be viewer, steward or admin, got %q", role)
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	key, hash := auth.NewAPIKey()
	k, err := db.APIKeyCreate(ctx, &store.APIKey{Name: name, Role: role, KeyHash: hash})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created API key %s (%s, role %s); it is shown only now:\n%s\n", k.Name, k.ID, k.Role, key)
	return nil
}

func cmdAPIKeyList(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, _, err := parse("apikey list", args, env, stdout, nil)
	if err != nil {
		return err
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	keys, err := db.APIKeyList(ctx)
	if err != nil {
		return err
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tROLE\tCREATED\tLAST USED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Role, when(&k.CreatedAt), when(k.LastUsedAt), when(k.RevokedAt))
	}
	return w.Flush()
}

func cmdAPIKeyRevoke(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, fs, err := parse("apikey revoke", args, env, stdout, nil)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("apikey revoke: name one key by its id (bot apikey list shows them)")
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	k, err := db.APIKeyRevoke(ctx, fs.Arg(0), time.Now())
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("apikey revoke: there is no API key %s (bot apikey list shows them)", fs.Arg(0))
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked API key %s (%s) as of %s\n", k.Name, k.ID, k.RevokedAt.UTC().Format(time.RFC3339))
	return nil
}

func cmdWorkflowImport(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	c, fs, err := parse("workflow import", args, env, stdout, nil)
	if err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("workflow import: name at least one .md file or directory")
	}
	var files []string
	for _, p := range fs.Args() {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("workflow import: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(p, "*.md"))
		if err != nil {
			return err
		}
		files = append(files, matches...)
	}
	db, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()
	lib := library.New(db, newLogger(stderr))
	// A memo that does not compile is still imported (as a draft, so a
	// steward can fix it in the console), but the import fails: a script
	// or CI job importing workflows must not take a broken one for done.
	var broken []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("workflow import: %w", err)
		}
		m, created, err := lib.ImportWorkflow(ctx, "", string(b))
		if err != nil {
			return fmt.Errorf("workflow import %s: %w", f, err)
		}
		verb := "updated"
		if created {
			verb = "created"
		}
		w, err := db.WorkflowGetByMemoID(ctx, m.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s %s (%s)\n", verb, f, w.Command, m.ID)
		for _, e := range w.Errors {
			fmt.Fprintf(stdout, "  %s:%d: %s\n", f, e.Line, e.Message)
		}
		if len(w.Errors) > 0 {
			broken = append(broken, f)
		}
	}
	if len(broken) > 0 {
		return fmt.Errorf("workflow import: %d of %d memos do not compile (imported as drafts; errors above): %s",
			len(broken), len(files), strings.Join(broken, ", "))
	}
	return nil
}
