package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store/sqlite"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "help.db")
	// Help must not open the database nor print the environment's values.
	env := map[string]string{"HOLDFAST_DB": db, "SLACK_BOT_TOKEN": "xoxb-secret-token", "HOLDFAST_ADDR": "0.0.0.0:9999"}
	list := []string{"usage: bot <command>", "\n  serve ", "\n  migrate ", "\n  user add ", "\n  apikey create ",
		"\n  workflow import ", "\n  enqueue ", "\n  help ", "'bot help <command>'"}
	serveFlags := []string{"usage: bot serve", "--addr string", "(env HOLDFAST_ADDR)", `(default "127.0.0.1:8080")`,
		"--slack-bot-token", "(env SLACK_BOT_TOKEN)", "--workers int", "(default 4)"}
	userAdd := []string{"usage: bot user add --username U", "--password-file string", "--slack-user", "--db string", "(env HOLDFAST_DB)"}

	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		notWant []string
		wantErr string
	}{
		{"DashDashHelp", []string{"--help"}, list, []string{"--addr"}, ""},
		{"DashH", []string{"-h"}, list, []string{"--addr"}, ""},
		{"Help", []string{"help"}, list, nil, ""},
		{"HelpServe", []string{"help", "serve"}, serveFlags, []string{"xoxb-secret", "9999"}, ""},
		{"ServeDashH", []string{"serve", "-h"}, serveFlags, []string{"xoxb-secret"}, ""},
		{"ServeDashDashHelp", []string{"serve", "--help"}, serveFlags, nil, ""},
		{"HelpUserAdd", []string{"help", "user", "add"}, userAdd, []string{"--slack-bot-token", "--addr"}, ""},
		{"UserAddDashH", []string{"user", "add", "-h"}, userAdd, nil, ""},
		{"HelpEnqueue", []string{"help", "enqueue"}, []string{"usage: bot enqueue COMMAND --dedupe KEY", "--payload string", "--session"}, nil, ""},
		{"EnqueueDashH", []string{"enqueue", "-h"}, []string{"--dedupe string"}, nil, ""},
		{"HelpHelp", []string{"help", "help"}, list, nil, ""},
		{"GroupDashH", []string{"user", "-h"}, []string{"usage: bot user <command>", "user add"}, []string{"serve"}, ""},
		{"HelpGroup", []string{"help", "workflow"}, []string{"workflow import"}, nil, ""},
		{"HelpUnknown", []string{"help", "nope"}, nil, nil, `unknown command "nope"; run 'bot help' for the list`},
		{"HelpTooMany", []string{"help", "serve", "migrate"}, nil, nil, "name one command"},
		{"GroupAlone", []string{"user"}, nil, nil, "user: name one of: bot user add"},
		{"GroupUnknownVerb", []string{"apikey", "delete"}, nil, nil, `there is no "apikey delete"`},
		{"BadFlag", []string{"serve", "--bogus"}, nil, nil, "run 'bot help serve' for its flags"},
		{"BadFlagBeforeCommand", []string{"--bogus"}, nil, nil, "serve: flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, env, "", tc.args...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err, out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, out, w)
			}
		})
	}
	require.NoFileExists(t, db, "help opens no database")
}

// TestEveryCommandHasHelp: each listed command answers -h with its synopsis.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HOLDFAST_DB": filepath.Join(t.TempDir(), "help.db")}
	for _, c := range commandList() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			require.NotEmpty(t, c.summary)
			out, err := runCLI(t, env, "", append([]string{"help"}, strings.Fields(c.name)...)...)
			require.NoError(t, err, out)
			if c.name != "help" {
				require.Contains(t, out, "usage: bot "+c.name+" "+c.args)
				require.Contains(t, out, "--db string", "every command reads the database setting")
			}
		})
	}
}

func TestExplainStoreError(t *testing.T) {
	t.Parallel()
	other := errors.New("sqlite: open: disk full")
	for _, tc := range []struct {
		name    string
		err     error
		want    string
		wantErr error
	}{
		{"NoFTS5", sqlite.ErrNoFTS5, installCommand, nil},
		{"NoFTS5Wrapped", fmt.Errorf("open: %w", sqlite.ErrNoFTS5), installCommand, nil},
		{"Other", other, "disk full", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := explainStoreError(nil, tc.err)
			require.ErrorContains(t, err, tc.want)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr, "other errors pass through unchanged")
			}
		})
	}
}
