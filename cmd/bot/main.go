// Command bot is Holdfast: the Slack bot, its workflow engine and its
// moderation console in one binary.
package main

import (
	"context"
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

const usage = `usage: bot [command] [flags]

commands:
  serve                 run the service (default)
  migrate               apply database migrations and exit
  user add              add a console user
  user passwd           set a console user's password (ends their sign-ins)
  apikey create         create an API key (printed once, last line of stdout)
  workflow import       import workflow memos from .md files or directories
  enqueue COMMAND       enqueue a workflow item

Run 'bot <command> -h' for the command's flags.`

// run is main without the process: tests call it with their own args, env
// and streams, and cancel ctx to stop the service.
func run(ctx context.Context, args []string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if (cmd == "user" || cmd == "apikey" || cmd == "workflow") && len(args) > 0 {
		cmd, args = cmd+" "+args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, args, env, stdout, stderr)
	case "migrate":
		return cmdMigrate(ctx, args, env, stdout, stderr)
	case "user add":
		return cmdUserAdd(ctx, args, env, stdin, stdout, stderr)
	case "user passwd":
		return cmdUserPasswd(ctx, args, env, stdin, stdout, stderr)
	case "apikey create":
		return cmdAPIKeyCreate(ctx, args, env, stdout, stderr)
	case "workflow import":
		return cmdWorkflowImport(ctx, args, env, stdout, stderr)
	case "enqueue":
		return cmdEnqueue(ctx, args, env, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}
