package workflow

import (
	"io/fs"
	"path"
	"strings"
	"testing"
)

func FuzzCompile(f *testing.F) {
	_ = fs.WalkDir(Examples, "examples", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path.Ext(p) == ".md" {
			b, _ := fs.ReadFile(Examples, p)
			f.Add(b)
		}
		return nil
	})
	f.Add([]byte(base().String()))
	f.Add([]byte(""))
	f.Add([]byte("## Trigger\n- **Command**\n## Steps\n1. **Process** x\n   ```prompt\n   {{if}}\n   ```\n"))
	f.Add([]byte("# W\n## Steps\n- **Guard** x\n  ```guard\n  min_chars: -1\n  contains: \"\n  ```\n## Policy\n- **Destination** worktree\n"))
	f.Add([]byte("## Trigger\n- **Invoke** 0 0 30 2 *\n- **Invoke** every\n\n## Load Contract\n* **Trigger** payload.\n\n## Policy\n**Retries** 99\n"))
	f.Add([]byte("\r\n## steps\r\n1. **Output**\r\n   ```prompt\r\n{{range .Context}}{{$.X}}{{end}}\r\n```"))
	// Shapes goldmark parses in superlinear time (see limits_test.go): the
	// nesting ones past the limit, the budgeted ones as small samples for
	// the fuzzer to grow (past their budgets they are tens of kilobytes,
	// which the unit tests cover), and a memo with bare-CR line endings.
	var indented strings.Builder
	for i := range 40 {
		indented.WriteString(strings.Repeat("  ", i) + "- a\n")
	}
	for _, shape := range []string{
		strings.Repeat(">", 200) + " hi",
		strings.Repeat("> - ", 40) + "hi\n" + strings.Repeat("1. ", 40),
		indented.String(),
		strings.Repeat("*a_", 50),
		strings.Repeat("[a](", 50) + "\n" + strings.Repeat("[[", 30) + strings.Repeat("]", 70),
		strings.Repeat("a``\n`", 20),
		strings.Repeat("[r]: /u\n", 50),
	} {
		f.Add([]byte(base().String() + "\n" + shape))
	}
	f.Add([]byte(strings.ReplaceAll(base().String(), "\n", "\r")))
	f.Fuzz(func(t *testing.T, src []byte) {
		m, errs := compile(src, Options{MemoExists: func(name string) bool { return len(name)%2 == 0 }})
		if (m == nil) != (len(errs) > 0) {
			t.Fatalf("manifest nil=%v with %d errors", m == nil, len(errs))
		}
		// Lines end at LF, CRLF or a lone CR.
		maxLine := 1
		for i, b := range src {
			if b == '\n' || b == '\r' && (i+1 == len(src) || src[i+1] != '\n') {
				maxLine++
			}
		}
		for i, e := range errs {
			if e.Line < 1 || e.Line > maxLine {
				t.Fatalf("error line %d outside 1..%d: %v", e.Line, maxLine, e)
			}
			if e.Message == "" {
				t.Fatal("empty message")
			}
			if i > 0 && errs[i-1].Line > e.Line {
				t.Fatal("errors not sorted")
			}
		}
		if m != nil {
			for _, s := range m.Steps {
				if s.Line < 1 {
					t.Fatalf("step line %d", s.Line)
				}
				s.Guard.Check("some output")
			}
			if m.Schedule != nil {
				m.Schedule.Next(cronEpoch)
				m.Schedule.Prev(cronEpoch)
			}
		}
	})
}
