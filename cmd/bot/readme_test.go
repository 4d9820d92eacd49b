package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README is what a newcomer follows on a fresh clone, so it is checked
// against the binary: every command, environment variable and make target it
// names exists, the configuration table is the settings' table, and its links
// resolve.

const repoRoot = "../.."

type doc struct {
	path string // relative to the repository root
	text string
	code []string // inline code spans and fenced blocks
}

// docs reads the README and the docs it links from docs/.
func docs(t *testing.T) []doc {
	t.Helper()
	paths := []string{"README.md"}
	md, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	for _, p := range md {
		rel, err := filepath.Rel(repoRoot, p)
		require.NoError(t, err)
		paths = append(paths, rel)
	}
	var out []doc
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		require.NoError(t, err)
		out = append(out, doc{path: p, text: string(b), code: codeOf(string(b))})
	}
	return out
}

var inlineCode = regexp.MustCompile("`([^`\n]+)`")

// codeOf returns the fenced blocks and inline code spans of markdown. A fence
// closes on a line of only backticks at least as long as its opening, so a
// ```` block may hold ``` blocks.
func codeOf(md string) []string {
	var out []string
	var block []string
	open := 0
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		ticks := len(trimmed) - len(strings.TrimLeft(trimmed, "`"))
		switch {
		case open == 0 && ticks >= 3:
			open, block = ticks, nil
		case open > 0 && ticks >= open && strings.Trim(trimmed, "`") == "":
			out = append(out, strings.Join(block, "\n"))
			open = 0
		case open > 0:
			block = append(block, line)
		default:
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// listedCommands parses `bot --help`'s command list.
func listedCommands(t *testing.T) map[string]bool {
	t.Helper()
	out, err := runCLI(t, map[string]string{}, "", "--help")
	require.NoError(t, err)
	_, list, ok := strings.Cut(out, "\ncommands:\n")
	require.True(t, ok, "bot --help has a commands: section\n%s", out)
	list, _, _ = strings.Cut(list, "\n\n")
	row := regexp.MustCompile(`^  ([a-z]+(?: [a-z]+)?)  +\S`)
	cmds := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		m := row.FindStringSubmatch(line)
		require.NotNil(t, m, "a command line is '  name  summary': %q", line)
		cmds[m[1]] = true
	}
	return cmds
}

// shellComment is a comment after a command; its prose is no call.
var shellComment = regexp.MustCompile(`(?m)\s#\s.*$`)

var botCall = regexp.MustCompile(`(?:^|[\s/(])bot((?: [a-z][a-z-]*){1,3})`)

func TestREADMECommandsExist(t *testing.T) {
	t.Parallel()
	cmds := listedCommands(t)
	resolve := func(words []string) (string, int) {
		if len(words) > 1 && cmds[words[0]+" "+words[1]] {
			return words[0] + " " + words[1], 2
		}
		if cmds[words[0]] {
			return words[0], 1
		}
		return "", 0
	}
	named := map[string]bool{}
	for _, d := range docs(t) {
		for _, code := range d.code {
			for _, m := range botCall.FindAllStringSubmatch(shellComment.ReplaceAllString(code, ""), -1) {
				words := strings.Fields(m[1])
				name, n := resolve(words)
				require.NotEmptyf(t, name, "%s names `bot %s`, which bot --help does not list", d.path, strings.Join(words, " "))
				named[name] = true
				if name == "help" && len(words) > n {
					topic, _ := resolve(words[n:])
					require.NotEmptyf(t, topic, "%s names `bot %s`, and there is no such command", d.path, strings.Join(words, " "))
					out, err := runCLI(t, map[string]string{}, "", append([]string{"help"}, strings.Fields(topic)...)...)
					require.NoError(t, err, out)
				}
			}
		}
	}
	for c := range cmds {
		require.Truef(t, named[c], "bot --help lists %q; the README should name `bot %s`", c, c)
	}
}

var envName = regexp.MustCompile(`\b(?:HOLDFAST|SLACK|OPENAI)_[A-Z0-9_]*[A-Z0-9]\b`)

// testEnv is every environment variable the repository's tests read, as a
// string literal in a _test.go file or in a test-support package (one
// whose name ends in "test" or "testdb": pgtest, storetest, testdb).
func testEnv(t *testing.T) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), ".") && p != repoRoot {
			return filepath.SkipDir
		}
		pkg := filepath.Base(filepath.Dir(p))
		support := strings.HasSuffix(pkg, "test") || pkg == "testdb"
		if e.IsDir() || !strings.HasSuffix(p, ".go") || !strings.HasSuffix(p, "_test.go") && !support {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`"((?:HOLDFAST|SLACK|OPENAI)_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(b), -1) {
			found[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

func TestREADMEEnvVarsExist(t *testing.T) {
	t.Parallel()
	var c config
	settings := map[string]setting{}
	for _, s := range c.settings() {
		settings[s.env] = s
	}
	fromTests := testEnv(t)
	serveHelp, err := runCLI(t, map[string]string{}, "", "help", "serve")
	require.NoError(t, err)
	for _, d := range docs(t) {
		for _, name := range envName.FindAllString(d.text, -1) {
			s, isSetting := settings[name]
			if !isSetting {
				require.Truef(t, fromTests[name], "%s names %s, which is neither a setting nor read by a test", d.path, name)
				continue
			}
			require.Containsf(t, serveHelp, "--"+s.flag+" ", "bot help serve lists the flag of %s", name)
			require.Containsf(t, serveHelp, "(env "+name+")", "bot help serve names %s", name)
		}
	}
}

// TestREADMEConfigTable: the Configuration table has one row per setting, with
// the setting's default wherever it has a literal one.
func TestREADMEConfigTable(t *testing.T) {
	t.Parallel()
	readme := docs(t)[0].text
	_, section, ok := strings.Cut(readme, "\n## Configuration\n")
	require.True(t, ok, "the README has a Configuration section")
	section, _, _ = strings.Cut(section, "\n## ")
	defaults := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Lenf(t, cells, 3, "a config row is | env | default | meaning |: %q", line)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "env" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		names := envName.FindAllString(cells[0], -1)
		require.NotEmptyf(t, names, "config row %q names an env var", line)
		for _, n := range names {
			_, dup := defaults[n]
			require.Falsef(t, dup, "%s has one row", n)
			defaults[n] = cells[1]
		}
	}
	var c config
	for _, s := range c.settings() {
		cell, ok := defaults[s.env]
		require.Truef(t, ok, "the Configuration table has a row for %s (--%s)", s.env, s.flag)
		if s.def != "" {
			require.Equalf(t, "`"+s.def+"`", cell, "the default of %s", s.env)
		}
		delete(defaults, s.env)
	}
	require.Empty(t, defaults, "every row of the Configuration table is a setting")
}

// makeCall is make at the start of a command line (not in a package list).
var makeCall = regexp.MustCompile(`(?m)(?:^|&&|;)\s*(?:[A-Z_]+=\S+ )*make ([a-z][a-z-]*)`)

func TestREADMEMakeTargetsAndLinks(t *testing.T) {
	t.Parallel()
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	link := regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)
	for _, d := range docs(t) {
		for _, code := range d.code {
			for _, m := range makeCall.FindAllStringSubmatch(code, -1) {
				require.Regexpf(t, `(?m)^`+regexp.QuoteMeta(m[1])+`:`, string(makefile), "%s names make %s", d.path, m[1])
			}
		}
		for _, m := range link.FindAllStringSubmatch(d.text, -1) {
			if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "mailto:") {
				continue
			}
			_, err := os.Stat(filepath.Join(repoRoot, filepath.Dir(d.path), m[1]))
			require.NoErrorf(t, err, "%s links %s", d.path, m[1])
		}
		require.NotContainsf(t, d.text, "SPEC", "%s stands on its own: a clone has no SPEC.md", d.path)
	}
}

// TestREADMEInstallCommand: the README's go install line is the one a
// binary without FTS5 prints, and it names this module's command.
func TestREADMEInstallCommand(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	module := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(gomod)
	require.NotNil(t, module)
	require.Equal(t, "go install -tags sqlite_fts5 "+string(module[1])+"/cmd/bot@latest", installCommand)
	require.Contains(t, docs(t)[0].text, installCommand)
}
