// Command bot is Holdfast: the Slack bot, its workflow engine and its
// moderation console in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], environ(), os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bot:", err)
		os.Exit(1)
	}
}

func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// command is one verb of the CLI. Its own flags are declared where it parses
// them (see parse), so a command's help is that command run with -h.
type command struct {
	name    string // one word, or group and verb ("user add")
	args    string // what follows the name in a synopsis
	summary string // one line, for the command list
	about   string // more, for the command's own help
	// settings names the setting flags the command reads; nil means all.
	settings []string
	run      func(ctx context.Context, args []string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) error
}

var storeSettings = []string{"db", "db-sync"}

// commandList is every command, in the order help lists them. It is a
// function rather than a variable because the commands' own code looks
// commands up (for their help), which a package variable could not allow.
func commandList() []command {
	noStdin := func(f func(context.Context, []string, map[string]string, io.Writer, io.Writer) error) func(context.Context, []string, map[string]string, io.Reader, io.Writer, io.Writer) error {
		return func(ctx context.Context, args []string, env map[string]string, _ io.Reader, stdout, stderr io.Writer) error {
			return f(ctx, args, env, stdout, stderr)
		}
	}
	return []command{
		{name: "serve", args: "[flags]", summary: "run the service: console, API, workflow engine and Slack (the default)",
			about: "Serves the console and JSON API, runs the workflow engine and, when SLACK_BOT_TOKEN is set, the Slack bridge.\n" +
				"On first start it creates the database, seeds the example workflows and creates the user admin.\n" +
				"This is what bot runs when no command is given.",
			run: noStdin(cmdServe)},
		{name: "migrate", args: "[flags]", summary: "apply database migrations and exit",
			settings: storeSettings, run: noStdin(cmdMigrate)},
		{name: "user add", args: "--username U --password-file F|- [--role viewer|steward|admin] [--slack-user UXXXX]",
			summary: "add a console user", about: "The password is the first line of the file (or of stdin with -), at least 8 characters.",
			settings: storeSettings, run: cmdUserAdd},
		{name: "user passwd", args: "--username U --password-file F|-",
			summary:  "set a console user's password (ends their sign-ins): the way back in for a lost admin password",
			settings: storeSettings, run: cmdUserPasswd},
		{name: "apikey create", args: "--name N [--role viewer|steward|admin]",
			summary: "create an API key (printed once, as the last line of stdout)",
			about:   "Send the key as 'Authorization: Bearer <key>' to /api.", settings: storeSettings, run: noStdin(cmdAPIKeyCreate)},
		{name: "apikey list", args: "[flags]", summary: "list API keys: id, name, role, when created, last used and revoked (never the keys)",
			settings: storeSettings, run: noStdin(cmdAPIKeyList)},
		{name: "apikey revoke", args: "KEY_ID", summary: "revoke an API key: it answers 401 from the next request on",
			about:    "The key stays listed, so what it did is still named by its name.",
			settings: storeSettings, run: noStdin(cmdAPIKeyRevoke)},
		{name: "workflow import", args: "FILE.md|DIR...", summary: "import workflow memos from .md files or directories",
			about: "Idempotent by command: importing a memo again updates the workflow with that command.\n" +
				"A memo that does not compile is imported as a draft and its errors are printed with line numbers.",
			settings: storeSettings, run: noStdin(cmdWorkflowImport)},
		{name: "enqueue", args: "COMMAND --dedupe KEY [--payload JSON] [--session ID]",
			summary: "enqueue a workflow item straight into the database",
			about: "A running server picks the item up on its next pass (at the latest after HOLDFAST_PASS_INTERVAL);\n" +
				"POST /api/workflows/{command}/enqueue starts it at once.",
			settings: storeSettings, run: noStdin(cmdEnqueue)},
		{name: "help", args: "[COMMAND]", summary: "list the commands, or show one command's flags"},
	}
}

func commandByName(name string) (command, bool) {
	for _, c := range commandList() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// errHelpShown is returned by a command that printed its help because it
// was asked to (-h): run answers success.
var errHelpShown = errors.New("help shown")

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// run is main without the process: tests call it with their own args, env
// and streams, and cancel ctx to stop the service.
func run(ctx context.Context, args []string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		args = []string{"serve"}
	case isHelpFlag(args[0]):
		printUsage(stdout)
		return nil
	case strings.HasPrefix(args[0], "-"):
		args = append([]string{"serve"}, args...) // flags alone configure serve
	}
	if args[0] == "help" {
		return help(ctx, args[1:], env, stdout, stderr)
	}
	cmd, rest, err := lookup(args, stdout)
	if err != nil || cmd.name == "" { // "" when a group's commands were listed
		return err
	}
	if err := cmd.run(ctx, rest, env, stdin, stdout, stderr); !errors.Is(err, errHelpShown) {
		return err
	}
	return nil
}

// lookup finds the command args name and returns the arguments after its
// name. A group's name with -h (bot user -h) lists the group's commands;
// the returned command then is the zero command.
func lookup(args []string, stdout io.Writer) (command, []string, error) {
	if len(args) > 1 {
		if c, ok := commandByName(args[0] + " " + args[1]); ok {
			return c, args[2:], nil
		}
	}
	if c, ok := commandByName(args[0]); ok {
		return c, args[1:], nil
	}
	var group []command
	for _, c := range commandList() {
		if strings.HasPrefix(c.name, args[0]+" ") {
			group = append(group, c)
		}
	}
	if len(group) == 0 {
		return command{}, nil, fmt.Errorf("unknown command %q; run 'bot help' for the list", args[0])
	}
	if len(args) > 1 && isHelpFlag(args[1]) {
		fmt.Fprintf(stdout, "usage: bot %s <command> [flags]\n\ncommands:\n", args[0])
		printCommands(stdout, group)
		return command{}, nil, nil
	}
	var names []string
	for _, c := range group {
		names = append(names, "bot "+c.name)
	}
	what := "name one"
	if len(args) > 1 {
		what = fmt.Sprintf("there is no %q", args[0]+" "+args[1])
	}
	return command{}, nil, fmt.Errorf("%s: %s of: %s", args[0], what, strings.Join(names, ", "))
}

// help is `bot help [COMMAND]`.
func help(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stdout)
		return nil
	}
	cmd, rest, err := lookup(append(append([]string(nil), args...), "-h"), stdout)
	switch {
	case err != nil || cmd.name == "":
		return err
	case len(rest) != 1:
		return fmt.Errorf("help: name one command, e.g. 'bot help %s'", cmd.name)
	case cmd.name == "help":
		printUsage(stdout)
		return nil
	}
	if err := cmd.run(ctx, []string{"-h"}, env, strings.NewReader(""), stdout, stderr); !errors.Is(err, errHelpShown) {
		return err
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "Holdfast: a Slack bot with a workflow engine and a web console, in one binary.\n\n"+
		"usage: bot <command> [flags]\n\ncommands:\n")
	printCommands(w, commandList())
	fmt.Fprint(w, "\nRun 'bot help <command>' (or 'bot <command> -h') for a command's flags.\n"+
		"With no command, bot runs serve. Every setting is a flag and an environment variable;\n"+
		"'bot help serve' lists them.\n")
}

func printCommands(w io.Writer, cmds []command) {
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.name))
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
}
