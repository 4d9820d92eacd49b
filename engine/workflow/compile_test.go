package workflow

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memo builds a workflow memo from sections so each test changes only what
// it is about and inherits a valid rest.
type memo struct {
	title, trigger, loads, steps, policy string
}

func base() memo {
	return memo{
		title:   "Test workflow",
		trigger: "- **Command** `/t`\n- **Status** `live`\n",
		loads:   "- **Search** tag:x\n",
		steps: "1. **Context** Load.\n" +
			"2. **Process** Draft.\n" +
			"   ```prompt\n" +
			"   {{.Payload.brief}}\n" +
			"   ```\n" +
			"3. **Output** Send.\n",
		policy: "- **Approval** `auto`\n",
	}
}

func (m memo) String() string {
	return "# " + m.title + "\n\n## Trigger\n" + m.trigger + "\n## Load Contract\n" + m.loads +
		"\n## Steps\n" + m.steps + "\n## Policy\n" + m.policy
}

var boldName = regexp.MustCompile(`\*\*([^*]+)\*\*`)

// with replaces the field of the same name in a field block, or appends it.
func with(block, item string) string {
	m := boldName.FindStringSubmatch(item)
	if m == nil {
		return block + item + "\n"
	}
	name := strings.ToLower(strings.TrimSuffix(m[1], ":"))
	var out []string
	for _, l := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		if m := boldName.FindStringSubmatch(l); m != nil && strings.ToLower(m[1]) == name {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(append(out, item), "\n") + "\n"
}

func without(block, name string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		if m := boldName.FindStringSubmatch(l); m != nil && strings.EqualFold(m[1], name) {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n"
}

// lineOf is the 1-based line of the first occurrence of sub in src.
func lineOf(t *testing.T, src, sub string) int {
	t.Helper()
	i := strings.Index(src, sub)
	require.GreaterOrEqual(t, i, 0, "%q not in source", sub)
	return 1 + strings.Count(src[:i], "\n")
}

// expectOne compiles src and requires exactly one error, on the line holding
// `at`, whose message contains msg.
func expectOne(t *testing.T, src, at, msg string, opts Options) {
	t.Helper()
	m, errs := Compile([]byte(src), opts)
	require.Nil(t, m)
	require.Len(t, errs, 1, "errors: %v\nsource:\n%s", errs, src)
	require.Equal(t, lineOf(t, src, at), errs[0].Line, "error %v", errs[0])
	require.Contains(t, errs[0].Message, msg)
}

func expectOK(t *testing.T, src string, opts Options) *Manifest {
	t.Helper()
	m, errs := Compile([]byte(src), opts)
	require.Empty(t, errs, "source:\n%s", src)
	require.NotNil(t, m)
	return m
}

func TestBaseCompiles(t *testing.T) {
	t.Parallel()
	m := expectOK(t, base().String(), Options{})
	require.Equal(t, "Test workflow", m.Title)
	require.Equal(t, "/t", m.Command)
	require.Equal(t, DefaultPolicy(), m.Policy)
	require.Nil(t, m.Schedule)
	require.Len(t, m.Steps, 3)
}

type fieldCase struct {
	name string
	item string                      // the field list item under test
	want func(*testing.T, *Manifest) // when the compile should succeed
	err  string                      // message substring when it should fail
	at   string                      // where the error is; default: the item
}

func runFieldCases(t *testing.T, cases []fieldCase, build func(item string) string) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := build(tc.item)
			if tc.err == "" {
				tc.want(t, expectOK(t, src, Options{}))
				return
			}
			at := tc.at
			if at == "" {
				at = tc.item
			}
			expectOne(t, src, at, tc.err, Options{})
		})
	}
}

func TestTriggerFields(t *testing.T) {
	t.Parallel()
	cmd := func(want string) func(*testing.T, *Manifest) {
		return func(t *testing.T, m *Manifest) { require.Equal(t, want, m.Command) }
	}
	status := func(want string) func(*testing.T, *Manifest) {
		return func(t *testing.T, m *Manifest) { require.Equal(t, want, m.Status) }
	}
	sched := func(invoke string, want *Schedule) func(*testing.T, *Manifest) {
		return func(t *testing.T, m *Manifest) {
			require.Equal(t, invoke, m.Invoke)
			require.Equal(t, want, m.Schedule)
		}
	}
	cases := []fieldCase{
		{name: "command backticked", item: "- **Command** `/draft-memo`", want: cmd("/draft-memo")},
		{name: "command bare", item: "- **Command** /a_b-9", want: cmd("/a_b-9")},
		{name: "command name case-insensitive", item: "- **command** `/x`", want: cmd("/x")},
		{name: "command colon", item: "- **Command:** `/x`", want: cmd("/x")},
		{name: "command no slash", item: "- **Command** `draft-memo`", err: "not a slash name"},
		{name: "command uppercase", item: "- **Command** `/Draft`", err: "lowercase letters"},
		{name: "command spaces", item: "- **Command** /draft memo", err: "not a slash name"},
		{name: "command slash only", item: "- **Command** `/`", err: "not a slash name"},
		{name: "command empty", item: "- **Command**", err: "Command is empty"},
		{name: "command too long", item: "- **Command** /" + strings.Repeat("a", 40), err: "longer than 32"},

		{name: "invoke free text", item: "- **Invoke** A row appears in the workflow's queue", want: sched("A row appears in the workflow's queue", nil)},
		{name: "invoke free text 5 words", item: "- **Invoke** When a brief is filed", want: sched("When a brief is filed", nil)},
		{name: "invoke every", item: "- **Invoke** `every 168h`", want: sched("every 168h", &Schedule{Every: 168 * time.Hour})},
		{name: "invoke every days", item: "- **Invoke** every 2d", want: sched("every 2d", &Schedule{Every: 48 * time.Hour})},
		{name: "invoke Every capital", item: "- **Invoke** Every 15m", want: sched("Every 15m", &Schedule{Every: 15 * time.Minute})},
		{name: "invoke cron", item: "- **Invoke** `0 9 * * 1`", want: sched("0 9 * * 1", &Schedule{Cron: "0 9 * * 1"})},
		{name: "invoke cron names", item: "- **Invoke** `30 8 * jan-mar mon-fri`", want: sched("30 8 * jan-mar mon-fri", &Schedule{Cron: "30 8 * jan-mar mon-fri"})},
		{name: "invoke descriptor", item: "- **Invoke** `@daily`", want: sched("@daily", &Schedule{Cron: "@daily"})},
		{name: "invoke every not duration", item: "- **Invoke** every Monday", err: `"Monday" is not a duration`},
		{name: "invoke every nothing", item: "- **Invoke** every", err: "has no interval"},
		{name: "invoke every too short", item: "- **Invoke** every 10ms", err: "at least 1s"},
		{name: "invoke every negative", item: "- **Invoke** every -1h", err: "at least 1s"},
		{name: "invoke at-every", item: "- **Invoke** `@every 1h`", err: "without @"},
		{name: "invoke bad descriptor", item: "- **Invoke** `@fortnightly`", err: "not a valid cron descriptor"},
		{name: "invoke cron bad minute", item: "- **Invoke** `61 * * * *`", err: "not a valid cron expression"},
		{name: "invoke cron 6 fields", item: "- **Invoke** `0 0 9 * * 1`", err: "has 6 fields"},
		{name: "invoke cron 4 fields", item: "- **Invoke** `0 9 * *`", err: "has 4 fields"},
		{name: "invoke cron never", item: "- **Invoke** `0 0 30 2 *`", err: "never fires"},
		{name: "invoke cron tz", item: "- **Invoke** `TZ=Europe/Paris 0 9 * * 1`", err: "time zones are not supported"},

		{name: "status live", item: "- **Status** `live`", want: status("live")},
		{name: "status paused", item: "- **Status** paused", want: status("paused")},
		{name: "status draft upper", item: "- **Status** `DRAFT`", want: status("draft")},
		{name: "status bad", item: "- **Status** `active`", err: `bad Status "active"`},
		{name: "status empty", item: "- **Status**", err: "Status is empty"},

		{name: "summary", item: "- **Summary** Drafts *one* memo", want: func(t *testing.T, m *Manifest) {
			require.Equal(t, "Drafts one memo", m.Summary)
		}},
		{name: "unknown field", item: "- **Schedule** every 1h", err: `unknown field "Schedule" in ## Trigger; allowed fields are Command, Invoke, Status, Summary`},
		{name: "not bold", item: "- Command `/y`", err: "put the field name in bold"},
	}
	runFieldCases(t, cases, func(item string) string {
		m := base()
		m.trigger = with(m.trigger, item)
		return m.String()
	})
}

func TestTriggerMissingAndDuplicate(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, trigger, at, err string }{
		{"missing command", "- **Status** `live`\n", "## Trigger", "missing Command"},
		{"missing status", "- **Command** `/t`\n", "## Trigger", "missing Status"},
		{"duplicate command", "- **Command** `/t`\n- **Status** `live`\n- **Command** `/u`\n", "- **Command** `/u`", "duplicate field Command in ## Trigger (first at line 4)"},
		{"duplicate invoke", "- **Command** `/t`\n- **Status** `live`\n- **Invoke** a\n- **invoke** b\n", "- **invoke** b", "duplicate field invoke"},
		{"field as paragraph", "- **Command** `/t`\n- **Status** `live`\n\n**Summary** text\n", "**Summary** text", "must be a list item"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := base()
			m.trigger = tc.trigger
			src := m.String()
			expectOne(t, src, tc.at, tc.err, Options{})
		})
	}
}

func TestLoadClasses(t *testing.T) {
	t.Parallel()
	exists := func(name string) bool { return name == "Style guide" || name == "House rules" }
	cases := []struct {
		name, loads string
		want        []Load // when ok
		at, err     string
		opts        Options
	}{
		{name: "gate", loads: "- **Gate** Style guide\n", want: []Load{{LoadGate, "Style guide", 0}}},
		{name: "hook", loads: "- **Hook** `House rules`\n", want: []Load{{LoadHook, "House rules", 0}}},
		{name: "trigger", loads: "- **Trigger** payload.targetMemoId\n", want: []Load{{LoadTrigger, "payload.targetMemoId", 0}}},
		{name: "trigger nested", loads: "- **Trigger** `payload.source.memoId`\n", want: []Load{{LoadTrigger, "payload.source.memoId", 0}}},
		{name: "search", loads: "- **Search** tag:brief\n", want: []Load{{LoadSearch, "tag:brief", 0}}},
		{name: "search repeatable, order kept", loads: "- **Search** alpha\n- **search** beta\n- **Gate** gee\n", want: []Load{{LoadSearch, "alpha", 0}, {LoadSearch, "beta", 0}, {LoadGate, "gee", 0}}},
		{name: "search filters", loads: "- **Search** tag:brief since:7d\n", want: []Load{{LoadSearch, "tag:brief since:7d", 0}}},
		{name: "thread", loads: "- **Thread** the conversation so far\n- **Hook** gee\n", want: []Load{{LoadThread, "the conversation so far", 0}, {LoadHook, "gee", 0}}},
		{name: "none", loads: "Nothing to load.\n", want: []Load{}},
		{name: "gate exists", loads: "- **Gate** Style guide\n- **Hook** House rules\n", opts: Options{MemoExists: exists}, want: []Load{{LoadGate, "Style guide", 0}, {LoadHook, "House rules", 0}}},

		{name: "gate missing memo", loads: "- **Gate** Style guide\n- **Gate** Nope\n", opts: Options{MemoExists: exists}, at: "- **Gate** Nope", err: `Gate memo "Nope" does not exist`},
		{name: "hook missing memo", loads: "- **Hook** Gone\n", opts: Options{MemoExists: exists}, at: "- **Hook** Gone", err: `Hook memo "Gone" does not exist`},
		{name: "trigger not payload", loads: "- **Trigger** targetMemoId\n", at: "- **Trigger**", err: "must name a payload field"},
		{name: "trigger bare payload", loads: "- **Trigger** payload\n", at: "- **Trigger**", err: "must name a payload field"},
		{name: "empty", loads: "- **Search**\n", at: "- **Search**", err: "Search load is empty"},
		{name: "unknown class", loads: "- **Fetch** x\n", at: "- **Fetch**", err: `unknown field "Fetch" in ## Load Contract; allowed fields are Gate, Hook, Trigger, Search, Thread, Edges`},
		{name: "search bad filter", loads: "- **Search** tag:brief since:lately\n", at: "- **Search**", err: `Search "tag:brief since:lately" does not parse: since:lately is not a window`},
		{name: "search bad limit", loads: "- **Search** limit:500\n", at: "- **Search**", err: "limit:500 is not a whole number from 1 to 50"},
		{name: "thread twice", loads: "- **Thread** the conversation\n- **Thread** again\n", at: "- **Thread** again", err: "Thread is loaded once"},
		{name: "edges", loads: "- **Edges** `7d`\n", want: []Load{{LoadEdges, "7d", 0}}},
		{name: "edges hours", loads: "- **edges** 36h\n", want: []Load{{LoadEdges, "36h", 0}}},
		{name: "edges not a window", loads: "- **Edges** last week\n", at: "- **Edges**", err: `bad Edges window "last week": not a duration`},
		{name: "edges zero", loads: "- **Edges** 0\n", at: "- **Edges**", err: "looks back over nothing"},
		{name: "edges negative", loads: "- **Edges** -1h\n", at: "- **Edges**", err: "negative"},
		{name: "edges too long", loads: "- **Edges** 400d\n", at: "- **Edges**", err: "longer than a year"},
		{name: "edges empty", loads: "- **Edges**\n", at: "- **Edges**", err: "Edges load is empty"},
		{name: "edges twice", loads: "- **Edges** 7d\n- **Edges** 1d\n", at: "- **Edges** 1d", err: "duplicate Edges load (first at line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := base()
			m.loads = tc.loads
			src := m.String()
			if tc.err != "" {
				expectOne(t, src, tc.at, tc.err, tc.opts)
				return
			}
			man := expectOK(t, src, tc.opts)
			require.Len(t, man.Loads, len(tc.want))
			for i, l := range man.Loads {
				require.Equal(t, tc.want[i].Class, l.Class)
				require.Equal(t, tc.want[i].Value, l.Value)
				off := strings.Index(src, "## Load Contract")
				require.Equal(t, lineOf(t, src, "## Load Contract")+strings.Count(src[off:strings.Index(src[off:], l.Value)+off], "\n"), l.Line)
			}
		})
	}
}

// TestThreadLoad: a Thread line's value only describes it, so it may be
// empty; a prompt reads the conversation as .Thread.
func TestThreadLoad(t *testing.T) {
	t.Parallel()
	m := base()
	m.loads = "- **Thread**\n"
	m.steps = "1. **Context** Load.\n2. **Process** Summarise.\n   ```prompt\n   {{range .Thread}}{{.Speaker}}: {{.Text}} {{.TS}}\n   {{end}}{{len $.Thread}}\n   ```\n3. **Output** Reply.\n"
	man := expectOK(t, m.String(), Options{})
	require.Equal(t, []Load{{Class: LoadThread, Value: "", Line: lineOf(t, m.String(), "- **Thread**")}}, man.Loads)
	out, err := man.Steps[1].Render(PromptData{Thread: []ThreadMessage{{Speaker: "Ada", Text: "hello"}}})
	require.NoError(t, err)
	require.Contains(t, out, "Ada: hello")
}

func TestStepKinds(t *testing.T) {
	t.Parallel()
	prompt := "   ```prompt\n   Hi {{.Payload.name}}\n   ```\n"
	cases := []struct {
		name, steps string
		want        func(*testing.T, []Step)
		at, err     string
	}{
		{name: "context", steps: "1. **Context** Load it.\n2. **Output** Go.\n", want: func(t *testing.T, s []Step) {
			require.Equal(t, Step{Kind: KindContext, Text: "Load it.", Line: s[0].Line}, s[0])
		}},
		{name: "process", steps: "1. **Process** Draft.\n" + prompt + "2. **Output** Go.\n", want: func(t *testing.T, s []Step) {
			require.Equal(t, KindProcess, s[0].Kind)
			require.Equal(t, "Hi {{.Payload.name}}\n", s[0].Prompt)
		}},
		{name: "guard without block", steps: "1. **Guard** Not empty.\n2. **Output** Go.\n", want: func(t *testing.T, s []Step) {
			require.Equal(t, KindGuard, s[0].Kind)
			require.Nil(t, s[0].Guard)
		}},
		{name: "guard with block", steps: "1. **Guard** Bounded.\n   ```guard\n   # comment\n   min_chars: 1\n   max_chars: 10\n   min_words: 1\n   max_words: 3\n   contains: \"a: b\"\n   contains: x\n   not_contains: TODO\n   ```\n2. **Output** Go.\n", want: func(t *testing.T, s []Step) {
			require.Equal(t, &GuardSpec{MinChars: 1, MaxChars: 10, MinWords: 1, MaxWords: 3, Contains: []string{"a: b", "x"}, NotContains: []string{"TODO"}}, s[0].Guard)
		}},
		{name: "prompt reads edges", steps: "1. **Process** A.\n   ```prompt\n   {{with .Edges}}{{.Total}}{{range .Kinds}}{{.Label}}{{end}}{{end}}\n   ```\n2. **Output** Go.\n", want: func(t *testing.T, s []Step) {
			require.Contains(t, s[0].Prompt, ".Edges")
		}},
		{name: "output", steps: "1. **output** Dispatch.\n", want: func(t *testing.T, s []Step) {
			require.Equal(t, KindOutput, s[0].Kind)
			require.Equal(t, "Dispatch.", s[0].Text)
		}},
		{name: "loose list and prose", steps: "Intro prose.\n\n1. **Context** A.\n\n   More words.\n\n2. **Output** B.\n", want: func(t *testing.T, s []Step) {
			require.Len(t, s, 2)
		}},

		{name: "unknown kind", steps: "1. **Review** Look.\n2. **Output** Go.\n", at: "1. **Review**", err: `unknown step kind "Review"; use one of Context, Process, Guard, Output`},
		{name: "kind not bold", steps: "1. Context Load.\n2. **Output** Go.\n", at: "1. Context", err: "must start with its kind in bold"},
		{name: "no steps", steps: "Nothing yet.\n", at: "## Steps", err: "no steps"},
		{name: "no output", steps: "1. **Context** A.\n", at: "1. **Context**", err: "no Output step"},
		{name: "output not last", steps: "1. **Output** A.\n2. **Context** B.\n", at: "1. **Output**", err: "Output must be the last step"},
		{name: "two outputs", steps: "1. **Context** A.\n2. **Output** B.\n3. **Output** C.\n", at: "3. **Output**", err: "exactly one Output step"},
		{name: "process without prompt", steps: "1. **Process** Draft.\n2. **Output** Go.\n", at: "1. **Process**", err: "Process step has no ```prompt block"},
		{name: "prompt not indented", steps: "1. **Process** Draft.\n\n```prompt\nx\n```\n\n2. **Output** Go.\n", at: "```prompt", err: "not inside a step"},
		{name: "bullets", steps: "- **Context** A.\n- **Output** B.\n", at: "- **Context**", err: "numbered list"},
		{name: "step as paragraph", steps: "**Context** A.\n\n1. **Output** B.\n", at: "**Context** A.", err: "must be a numbered list item"},
		{name: "prompt on context", steps: "1. **Context** A.\n" + prompt + "2. **Output** Go.\n", at: "```prompt", err: "only Process steps take a ```prompt block"},
		{name: "two prompts", steps: "1. **Process** A.\n" + prompt + "\n   ```prompt\n   again\n   ```\n2. **Output** Go.\n", at: "   ```prompt\n   again", err: "second ```prompt block"},
		{name: "guard on process", steps: "1. **Process** A.\n" + prompt + "\n   ```guard\n   min_chars: 1\n   ```\n2. **Output** Go.\n", at: "```guard", err: "only Guard steps take a ```guard block"},
		{name: "unknown fence", steps: "1. **Process** A.\n   ```promt\n   x\n   ```\n2. **Output** Go.\n", at: "```promt", err: "unknown block ```promt"},
		{name: "fence without info", steps: "1. **Context** A.\n   ```\n   x\n   ```\n2. **Output** Go.\n", at: "   ```\n", err: "needs a kind"},
		{name: "empty prompt", steps: "1. **Process** A.\n   ```prompt\n   ```\n2. **Output** Go.\n", at: "```prompt", err: "```prompt block is empty"},
		{name: "prompt parse error", steps: "1. **Process** A.\n   ```prompt\n   line one\n   {{.Payload.x}\n   ```\n2. **Output** Go.\n", at: "{{.Payload.x}", err: "prompt template does not parse: bad character"},
		{name: "prompt unclosed", steps: "1. **Process** A.\n   ```prompt\n   {{if .Payload.x}}\n   yes\n   ```\n2. **Output** Go.\n", err: "prompt template does not parse", at: "{{if"},
		{name: "prompt bad field", steps: "1. **Process** A.\n   ```prompt\n   ok\n   {{.Paylod.brief}}\n   ```\n2. **Output** Go.\n", at: "{{.Paylod", err: "prompt uses .Paylod, which does not exist"},
		{name: "prompt bad root var", steps: "1. **Process** A.\n   ```prompt\n   {{range .Context}}{{$.Sesion}}{{end}}\n   ```\n2. **Output** Go.\n", at: "{{range", err: "prompt uses .Sesion"},
		{name: "guard bad key", steps: "1. **Guard** A.\n   ```guard\n   min_chars: 1\n   max_lines: 3\n   ```\n2. **Output** Go.\n", at: "max_lines", err: `unknown guard key "max_lines"`},
		{name: "guard not key value", steps: "1. **Guard** A.\n   ```guard\n   short please\n   ```\n2. **Output** Go.\n", at: "short please", err: "is not `key: value`"},
		{name: "guard bad int", steps: "1. **Guard** A.\n   ```guard\n   max_words: many\n   ```\n2. **Output** Go.\n", at: "max_words", err: `guard max_words must be a whole number >= 0, not "many"`},
		{name: "guard negative", steps: "1. **Guard** A.\n   ```guard\n   min_words: -1\n   ```\n2. **Output** Go.\n", at: "min_words", err: "whole number >= 0"},
		{name: "guard dup key", steps: "1. **Guard** A.\n   ```guard\n   min_chars: 1\n   min_chars: 2\n   ```\n2. **Output** Go.\n", at: "min_chars: 2", err: "set twice"},
		{name: "guard min over max", steps: "1. **Guard** A.\n   ```guard\n   min_chars: 10\n   max_chars: 5\n   ```\n2. **Output** Go.\n", at: "```guard", err: "no output could pass"},
		{name: "guard empty contains", steps: "1. **Guard** A.\n   ```guard\n   contains: \"\"\n   ```\n2. **Output** Go.\n", at: "contains", err: "non-empty string"},
		{name: "guard bad quote", steps: "1. **Guard** A.\n   ```guard\n   not_contains: \"oops\n   ```\n2. **Output** Go.\n", at: "not_contains", err: "bad quoted string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := base()
			m.steps = tc.steps
			src := m.String()
			if tc.err != "" {
				expectOne(t, src, tc.at, tc.err, Options{})
				return
			}
			man := expectOK(t, src, Options{})
			for _, s := range man.Steps {
				require.GreaterOrEqual(t, s.Line, lineOf(t, src, "## Steps"))
			}
			tc.want(t, man.Steps)
		})
	}
}

func TestPolicyFields(t *testing.T) {
	t.Parallel()
	pol := func(f func(*Policy)) func(*testing.T, *Manifest) {
		return func(t *testing.T, m *Manifest) {
			want := DefaultPolicy()
			f(&want)
			require.Equal(t, want, m.Policy)
		}
	}
	cases := []fieldCase{
		{name: "approval auto", item: "- **Approval** `auto`", want: pol(func(p *Policy) {})},
		{name: "approval hold", item: "- **Approval** `Hold`", want: pol(func(p *Policy) { p.Approval = "hold" })},
		{name: "approval bad", item: "- **Approval** `manual`", err: `bad Approval "manual"`},

		{name: "destination memo", item: "- **Destination** memo", want: pol(func(p *Policy) {})},
		{name: "destination reply", item: "- **Destination** `reply`", want: pol(func(p *Policy) { p.Destination = "reply" })},
		{name: "destination worktree", item: "- **Destination** `worktree`", err: "destination worktree is not supported; use memo or reply"},
		{name: "destination unknown", item: "- **Destination** `email`", err: `unknown Destination "email"; use memo or reply`},

		{name: "model template", item: "- **Model** `template`", want: pol(func(p *Policy) { p.Model = "template" })},
		{name: "model openai", item: "- **Model** `openai:gpt-4o-mini`", want: pol(func(p *Policy) { p.Model = "openai:gpt-4o-mini" })},
		{name: "model openai case", item: "- **Model** OpenAI:gpt-4.1", want: pol(func(p *Policy) { p.Model = "openai:gpt-4.1" })},
		{name: "model openai bare", item: "- **Model** `openai`", err: "names no model"},
		{name: "model openai space", item: "- **Model** openai:gpt 4", err: "bad model name"},
		{name: "model other", item: "- **Model** `claude`", err: `bad model spec "claude"; use template or openai:<model>`},

		{name: "gate label", item: "- **Gate label** Review draft", want: pol(func(p *Policy) { p.GateLabel = "Review draft" })},
		{name: "gate label underscore", item: "- **gate_label** R", want: pol(func(p *Policy) { p.GateLabel = "R" })},

		{name: "timeout", item: "- **Timeout** `2m`", want: pol(func(p *Policy) { p.Timeout = 2 * time.Minute })},
		{name: "timeout none", item: "- **Timeout** none", want: pol(func(p *Policy) {})},
		{name: "timeout bad", item: "- **Timeout** `two minutes`", err: `bad Timeout "two minutes": not a duration`},
		{name: "timeout negative", item: "- **Timeout** -5s", err: "negative"},

		{name: "retries", item: "- **Retries** `0`", want: pol(func(p *Policy) { p.Retries = 0 })},
		{name: "retries five", item: "- **Retries** 5", want: pol(func(p *Policy) { p.Retries = 5 })},
		{name: "retries bad", item: "- **Retries** lots", err: `bad Retries "lots"; use a whole number from 0 to 10`},
		{name: "retries negative", item: "- **Retries** -1", err: "from 0 to 10"},
		{name: "retries too many", item: "- **Retries** 11", err: "from 0 to 10"},

		{name: "self approval allowed", item: "- **Self approval** `allowed`", want: pol(func(p *Policy) { p.SelfApproval = true })},
		{name: "self approval refused", item: "- **Self approval** refused", want: pol(func(p *Policy) {})},
		{name: "self approval bad", item: "- **Self approval** yes", err: `bad Self approval "yes"; use allowed or refused`},

		{name: "approvals", item: "- **Approvals** `2`", want: pol(func(p *Policy) { p.Approvals = 2 })},
		{name: "approvals zero", item: "- **Approvals** 0", err: "from 1 to 20"},
		{name: "approvals word", item: "- **Approvals** two", err: `bad Approvals "two"`},

		{name: "hold timeout", item: "- **Hold timeout** `24h`", want: pol(func(p *Policy) { p.HoldTimeout = 24 * time.Hour })},
		{name: "hold timeout days", item: "- **Hold timeout** 2d", want: pol(func(p *Policy) { p.HoldTimeout = 48 * time.Hour })},
		{name: "hold timeout bad", item: "- **Hold timeout** tomorrow", err: `bad Hold timeout "tomorrow"`},
		{name: "remind after", item: "- **Remind after** `4h`", want: pol(func(p *Policy) { p.RemindAfter = 4 * time.Hour })},
		{name: "remind after days", item: "- **Remind after** 1d", want: pol(func(p *Policy) { p.RemindAfter = 24 * time.Hour })},
		{name: "remind after none", item: "- **Remind after** none", want: pol(func(p *Policy) {})},
		{name: "remind after bad", item: "- **Remind after** soon", err: `bad Remind after "soon"`},

		{name: "on timeout without hold timeout", item: "- **On timeout** approve", err: "no effect without a Hold timeout"},

		{name: "token budget", item: "- **Token budget** `1000`", want: pol(func(p *Policy) { p.TokenBudget = 1000 })},
		{name: "token budget grouped", item: "- **Token budget** 10,000", want: pol(func(p *Policy) { p.TokenBudget = 10000 })},
		{name: "token budget underscores", item: "- **token_budget** 2_500", want: pol(func(p *Policy) { p.TokenBudget = 2500 })},
		{name: "token budget none", item: "- **Token budget** none", want: pol(func(p *Policy) {})},
		{name: "token budget zero", item: "- **Token budget** 0", want: pol(func(p *Policy) {})},
		{name: "token budget word", item: "- **Token budget** lots", err: `bad Token budget "lots"; write a whole number of tokens from 1 to 1000000000`},
		{name: "token budget negative", item: "- **Token budget** -5", err: `bad Token budget "-5"`},
		{name: "token budget fraction", item: "- **Token budget** 1.5k", err: `bad Token budget "1.5k"`},
		{name: "token budget too big", item: "- **Token budget** 5000000000", err: `bad Token budget "5000000000"`},
		{name: "token budget empty", item: "- **Token budget**", err: `bad Token budget ""`},
		{name: "unknown field", item: "- **Priority** high", err: `unknown field "Priority" in ## Policy; allowed fields are Approval, Destination, Model, Gate label`},
	}
	runFieldCases(t, cases, func(item string) string {
		m := base()
		m.policy = with(m.policy, item)
		return m.String()
	})

	t.Run("on timeout", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"approve", "reject"} {
			m := base()
			m.policy = "- **Hold timeout** 1h\n- **On timeout** `" + v + "`\n"
			require.Equal(t, v, expectOK(t, m.String(), Options{}).Policy.OnTimeout)
		}
		m := base()
		m.policy = "- **Hold timeout** 1h\n- **On timeout** `ignore`\n"
		src := m.String()
		expectOne(t, src, "- **On timeout**", `bad On timeout "ignore"; use reject or approve`, Options{})
	})
	t.Run("duplicate", func(t *testing.T) {
		t.Parallel()
		m := base()
		m.policy = "- **Approval** auto\n- **Timeout** 1m\n- **APPROVAL** hold\n"
		src := m.String()
		expectOne(t, src, "- **APPROVAL**", "duplicate field APPROVAL in ## Policy", Options{})
	})
}

func TestSectionErrors(t *testing.T) {
	t.Parallel()
	t.Run("unknown section", func(t *testing.T) {
		t.Parallel()
		src := base().String() + "\n## Notes\n- whatever\n"
		expectOne(t, src, "## Notes", `unknown section "Notes"`, Options{})
	})
	t.Run("duplicate section", func(t *testing.T) {
		t.Parallel()
		src := base().String() + "\n## POLICY\n- **Timeout** 1m\n"
		expectOne(t, src, "## POLICY", "duplicate section ## Policy", Options{})
	})
	for _, name := range []string{"Trigger", "Load Contract", "Steps", "Policy"} {
		t.Run("missing "+name, func(t *testing.T) {
			t.Parallel()
			src := base().String()
			i := strings.Index(src, "## "+name)
			j := strings.Index(src[i+3:], "## ")
			if j < 0 {
				src = src[:i]
			} else {
				src = src[:i] + src[i+3+j:]
			}
			m, errs := Compile([]byte(src), Options{})
			require.Nil(t, m)
			require.Equal(t, Errors{{Line: 1, Message: "missing section ## " + name}}, errs)
		})
	}
	t.Run("case-insensitive headings", func(t *testing.T) {
		t.Parallel()
		src := strings.NewReplacer("## Trigger", "## TRIGGER", "## Load Contract", "## load   contract", "## Steps", "## steps").Replace(base().String())
		expectOK(t, src, Options{})
	})
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		m, errs := Compile(nil, Options{})
		require.Nil(t, m)
		require.Len(t, errs, 4)
	})
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		m, errs := Compile([]byte(strings.Repeat("a", MaxSourceBytes+1)), Options{})
		require.Nil(t, m)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0].Message, "the limit is")
	})
}

func TestEveryErrorReportedSorted(t *testing.T) {
	t.Parallel()
	src := "# W\n\n## Policy\n- **Approval** maybe\n- **Destination** worktree\n\n## Trigger\n- **Command** nope\n- **Status** on\n\n## Steps\n1. **Process** x\n2. **Jump** y\n\n## Load Contract\n- **Gate** Missing\n"
	m, errs := Compile([]byte(src), Options{MemoExists: func(string) bool { return false }})
	require.Nil(t, m)
	var got []int
	for _, e := range errs {
		got = append(got, e.Line)
	}
	require.Equal(t, []int{4, 5, 8, 9, 12, 12, 13, 16}, got, "%v", errs)
	require.Contains(t, errs.Error(), "line 5: destination worktree is not supported; use memo or reply\n")
	require.Error(t, errs.Err())
	require.NoError(t, Errors(nil).Err())
}

func TestExamplesCompile(t *testing.T) {
	t.Parallel()
	memos, err := ExampleMemos()
	require.NoError(t, err)
	titles := map[string]bool{}
	seenWorkflow := false
	for _, m := range memos {
		switch m.MemoType {
		case "note":
			require.False(t, seenWorkflow, "context memos must come first")
			titles[m.Title] = true
		case "workflow":
			seenWorkflow = true
		default:
			t.Fatalf("memo type %q", m.MemoType)
		}
	}
	require.True(t, titles["Style guide"])
	require.True(t, titles["House rules"])
	exists := func(name string) bool { return titles[name] }

	byCmd := map[string]*Manifest{}
	for _, m := range memos {
		if m.MemoType != "workflow" {
			continue
		}
		man, errs := Compile([]byte(m.Body), Options{MemoExists: exists})
		require.Empty(t, errs, m.Title)
		require.Equal(t, m.Title, man.Title)
		byCmd[man.Command] = man
	}
	require.Len(t, byCmd, 3)

	d := byCmd["/draft-memo"]
	require.Equal(t, "Draft memo from brief", d.Title)
	require.Equal(t, "hold", d.Policy.Approval)
	require.Equal(t, "Review draft", d.Policy.GateLabel)
	require.Equal(t, 2*time.Minute, d.Policy.Timeout)
	require.Equal(t, []Load{
		{LoadGate, "Style guide", 10}, {LoadHook, "House rules", 11},
		{LoadTrigger, "payload.targetMemoId", 12}, {LoadSearch, "tag:brief", 13},
	}, d.Loads)
	require.Equal(t, []string{"context", "process", "guard", "output"}, kinds(d.Steps))
	require.Equal(t, &GuardSpec{MinChars: 1, MaxChars: 20000}, d.Steps[2].Guard)
	require.Nil(t, d.Schedule)

	s := byCmd["/summarize-thread"]
	require.Equal(t, "reply", s.Policy.Destination)
	require.Equal(t, "auto", s.Policy.Approval)
	require.Empty(t, s.Policy.Model, "the service's model: a real one is asked for a summary")
	require.Contains(t, kindsOfLoads(s.Loads), LoadThread)
	out, err := s.Steps[1].Render(PromptData{
		Payload: map[string]any{"brief": "the launch date"},
		Thread:  []ThreadMessage{{Speaker: "Ada", Text: "Launch on Monday?"}, {Speaker: "Bob", Text: "Tuesday is safer."}},
	})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "# Summary of this thread\n"), out)
	require.Contains(t, out, "Summarise this conversation", "the prompt asks a real model for a summary")
	require.Contains(t, out, "Focus on: the launch date")
	require.Contains(t, out, "- **Ada**: Launch on Monday?\n- **Bob**: Tuesday is safer.\n", "speaker by speaker, in order")
	empty, err := s.Steps[1].Render(PromptData{Thread: []ThreadMessage{}})
	require.NoError(t, err)
	require.Contains(t, empty, "No messages to summarise yet")
	require.NotContains(t, empty, "Focus on")

	w := byCmd["/weekly-digest"]
	require.Equal(t, "live", w.Status)
	require.NotNil(t, w.Schedule)
	require.Equal(t, "memo", w.Policy.Destination)
	var searches []string
	for _, l := range w.Loads {
		if l.Class == LoadSearch {
			searches = append(searches, l.Value)
		}
	}
	require.Equal(t, []string{"tag:brief since:7d"}, searches, "the week's briefs: a tag filter, not the words tag and brief")

	// The draft-memo example is the one in SPEC §4.1, verbatim.
	b, err := fs.ReadFile(Examples, path.Join("examples", "draft-memo.md"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "# Draft memo from brief\n\n## Trigger\n- **Command** `/draft-memo`\n"))
}

func kinds(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Kind)
	}
	return out
}

func kindsOfLoads(loads []Load) []string {
	var out []string
	for _, l := range loads {
		out = append(out, l.Class)
	}
	return out
}

func TestFirstHeading(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"# Hello *world*\n":            "Hello world",
		"intro\n\n## Sub\n\n# Title\n": "Title",
		"Title\n=====\n":               "Title",
		"no heading":                   "",
		"":                             "",
	}
	for in, want := range cases {
		require.Equal(t, want, FirstHeading([]byte(in)), in)
	}
}

func BenchmarkCompileExamples(b *testing.B) {
	memos, err := ExampleMemos()
	require.NoError(b, err)
	var srcs [][]byte
	for _, m := range memos {
		if m.MemoType == "workflow" {
			srcs = append(srcs, []byte(m.Body))
		}
	}
	exists := func(string) bool { return true }
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, s := range srcs {
			if _, errs := Compile(s, Options{MemoExists: exists}); len(errs) > 0 {
				b.Fatal(errs)
			}
		}
	}
}

func TestCommandOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, want string
	}{
		{"Valid", "## Trigger\n- **Command** `/ok`\n", "/ok"},
		{"BrokenElsewhere", "## Trigger\n- **Command** `/broken`\n- **Status** `nope`\n## Bogus\n", "/broken"},
		{"BadCommand", "## Trigger\n- **Command** `Not A Command`\n", ""},
		{"NoTrigger", "# Title only\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, CommandOf([]byte(tc.src)))
		})
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"# Broken\n\n## Trigger\n- **Command** `/broken`\n- **Status** `live`\n":    "Broken Trigger Command /broken Status live",
		"Some [linked](https://x.y) *words*,\nwrapped.\n\n```prompt\nhidden\n```\n": "Some linked words, wrapped.",
		"> quoted\n\n1. first\n2. second":                                           "quoted first second",
		"":                                                                          "",
	} {
		require.Equal(t, want, PlainText([]byte(in)), in)
	}
}
