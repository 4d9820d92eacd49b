package workflow

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/yuin/goldmark/ast"
)

const stepKinds = "Context, Process, Guard, Output"

// templateErrRe picks the line out of a text/template parse error so that it
// can be mapped back to the memo's own line numbers.
var templateErrRe = regexp.MustCompile(`^template: [^:]*:(\d+):(?:\d+:)? ?(.*)$`)

var promptFields = map[string]bool{"Payload": true, "Context": true, "Session": true, "Workflow": true, "Edges": true}

func (c *compiler) steps(s *section) {
	for _, n := range s.nodes {
		switch v := n.(type) {
		case *ast.List:
			if !v.IsOrdered() {
				c.errorf(c.line(v), "steps must be a numbered list (1. 2. 3.), not bullets")
			}
			for it := v.FirstChild(); it != nil; it = it.NextSibling() {
				c.step(it)
			}
		case *ast.Paragraph:
			if name, _, ok := c.splitLead(v); ok {
				c.errorf(c.line(v), "step %q must be a numbered list item; write `1. **%s** ...`", name, name)
			}
		case *ast.FencedCodeBlock:
			lang, _, _ := c.fenced(v)
			if n := len(c.m.Steps); n > 0 && lang == "prompt" {
				c.excusePrompt(c.m.Steps[n-1].Line)
			}
			c.errorf(c.line(v), "```%s block is not inside a step; indent it under its step (3 spaces under `1. `)", lang)
		}
	}
	if len(c.m.Steps) == 0 {
		c.errorf(s.line, "no steps; ## Steps needs a numbered list ending in an **Output** step")
		return
	}
	for _, st := range c.m.Steps {
		if st.Kind == KindProcess && st.Prompt == "" && !c.promptExcused[st.Line] {
			c.errorf(st.Line, "Process step has no ```prompt block; indent one under the step")
		}
	}
	var outputs []int
	for i, st := range c.m.Steps {
		if st.Kind == KindOutput {
			outputs = append(outputs, i)
		}
	}
	switch {
	case len(outputs) > 1:
		for _, i := range outputs[1:] {
			c.errorf(c.m.Steps[i].Line, "a workflow has exactly one Output step; this is another (first at line %d)", c.m.Steps[outputs[0]].Line)
		}
	case len(outputs) == 1 && outputs[0] != len(c.m.Steps)-1:
		st := c.m.Steps[outputs[0]]
		c.errorf(st.Line, "Output must be the last step; move it after step %d", len(c.m.Steps))
	case len(outputs) == 0:
		c.errorf(c.m.Steps[len(c.m.Steps)-1].Line, "no Output step; end ## Steps with `N. **Output** ...` so the result is dispatched")
	}
}

func (c *compiler) step(item ast.Node) {
	line := c.line(item)
	para := firstPara(item)
	if para == nil {
		c.errorf(line, "step must start with its kind in bold, like `1. **Process** Draft the memo.`")
		return
	}
	raw, prose, ok := c.splitLead(para)
	if !ok {
		c.errorf(line, "step must start with its kind in bold (%s), like `1. **Process** Draft the memo.`", stepKinds)
		return
	}
	kind := normName(raw)
	switch kind {
	case KindContext, KindProcess, KindGuard, KindOutput:
	default:
		c.errorf(line, "unknown step kind %q; use one of %s", raw, stepKinds)
		return
	}
	st := Step{Kind: kind, Text: prose, Line: line}
	hasPrompt, hasGuard, badFence := false, false, false
	for n := para.NextSibling(); n != nil; n = n.NextSibling() {
		fc, ok := n.(*ast.FencedCodeBlock)
		if !ok {
			continue
		}
		lang, lines, lineNos := c.fenced(fc)
		fline := c.line(fc)
		switch lang {
		case "prompt":
			switch {
			case kind != KindProcess:
				c.errorf(fline, "only Process steps take a ```prompt block; this is a %s step", raw)
			case hasPrompt:
				c.errorf(fline, "step has a second ```prompt block; a Process step has exactly one")
			default:
				st.Prompt = strings.Join(lines, "")
				c.checkPrompt(st.Prompt, fline, lineNos)
			}
			hasPrompt = true
		case "guard":
			switch {
			case kind != KindGuard:
				c.errorf(fline, "only Guard steps take a ```guard block; this is a %s step", raw)
			case hasGuard:
				c.errorf(fline, "step has a second ```guard block; put all checks in one")
			default:
				st.Guard = c.guardSpec(lines, lineNos, fline)
			}
			hasGuard = true
		case "":
			badFence = true
			c.errorf(fline, "code block in a step needs a kind: ```prompt (Process) or ```guard (Guard)")
		default:
			badFence = true
			c.errorf(fline, "unknown block ```%s in a step; use ```prompt (Process) or ```guard (Guard)", lang)
		}
	}
	if hasPrompt || badFence {
		// The block is there but unusable; that error is the one to fix.
		c.excusePrompt(line)
	}
	c.m.Steps = append(c.m.Steps, st)
}

// excusePrompt suppresses "Process step has no prompt" for the step at
// line when a more specific error about its block has been reported.
func (c *compiler) excusePrompt(line int) {
	if c.promptExcused == nil {
		c.promptExcused = map[int]bool{}
	}
	c.promptExcused[line] = true
}

// checkPrompt parses the template now so that a typo fails the compile, not
// a run hours later after a steward has queued work.
func (c *compiler) checkPrompt(body string, fenceLine int, lineNos []int) {
	lineAt := func(tplLine int) int { // tplLine is 1-based within the body
		if tplLine >= 1 && tplLine <= len(lineNos) {
			return lineNos[tplLine-1]
		}
		return fenceLine + 1
	}
	if strings.TrimSpace(body) == "" {
		c.errorf(fenceLine, "```prompt block is empty; write the prompt as a Go template, like {{.Payload.brief}}")
		return
	}
	t, err := template.New("prompt").Option("missingkey=zero").Parse(body)
	if err != nil {
		msg := err.Error()
		tl := 0
		if m := templateErrRe.FindStringSubmatch(msg); m != nil {
			tl, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		c.errorf(lineAt(tl), "prompt template does not parse: %s", msg)
		return
	}
	if t.Tree == nil || t.Root == nil {
		return
	}
	walkTemplate(t.Root, true, func(n parse.Node, name string) {
		tl := 1 + strings.Count(body[:min(max(int(n.Position()), 0), len(body))], "\n")
		c.errorf(lineAt(tl), "prompt uses .%s, which does not exist; a prompt can use .Payload, .Context, .Session, .Workflow and .Edges", name)
	})
}

// walkTemplate reports field references that cannot resolve against
// PromptData. Only references made where dot is still PromptData are checked:
// inside range and with, dot is something else the compiler cannot know.
func walkTemplate(n parse.Node, top bool, bad func(parse.Node, string)) {
	if n == nil {
		return
	}
	switch v := n.(type) {
	case *parse.ListNode:
		if v == nil {
			return
		}
		for _, ch := range v.Nodes {
			walkTemplate(ch, top, bad)
		}
	case *parse.ActionNode:
		walkTemplate(v.Pipe, top, bad)
	case *parse.PipeNode:
		if v == nil {
			return
		}
		for _, cmd := range v.Cmds {
			walkTemplate(cmd, top, bad)
		}
	case *parse.CommandNode:
		for _, a := range v.Args {
			walkTemplate(a, top, bad)
		}
	case *parse.ChainNode:
		walkTemplate(v.Node, top, bad)
	case *parse.FieldNode:
		if top && len(v.Ident) > 0 && !promptFields[v.Ident[0]] {
			bad(v, v.Ident[0])
		}
	case *parse.VariableNode:
		// $ is always PromptData, wherever it appears.
		if len(v.Ident) > 1 && v.Ident[0] == "$" && !promptFields[v.Ident[1]] {
			bad(v, v.Ident[1])
		}
	case *parse.IfNode:
		walkTemplate(v.Pipe, top, bad)
		walkTemplate(v.List, top, bad)
		walkTemplate(v.ElseList, top, bad)
	case *parse.RangeNode:
		walkTemplate(v.Pipe, top, bad)
		walkTemplate(v.List, false, bad)
		walkTemplate(v.ElseList, top, bad)
	case *parse.WithNode:
		walkTemplate(v.Pipe, top, bad)
		walkTemplate(v.List, false, bad)
		walkTemplate(v.ElseList, top, bad)
	case *parse.TemplateNode:
		walkTemplate(v.Pipe, top, bad)
	}
}

// guardSpec parses `key: value` lines. Every bad line is reported, not just
// the first, so an author can fix the block in one pass.
func (c *compiler) guardSpec(lines []string, lineNos []int, fenceLine int) *GuardSpec {
	g := &GuardSpec{}
	seen := map[string]int{}
	for i, raw := range lines {
		ln := lineNos[i]
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		key, val, ok := strings.Cut(l, ":")
		if !ok {
			c.errorf(ln, "guard line %q is not `key: value`; keys are %s", l, guardKeys)
			continue
		}
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		switch key {
		case "min_chars", "max_chars", "min_words", "max_words":
			if first, dup := seen[key]; dup {
				c.errorf(ln, "guard key %s is set twice (first at line %d)", key, first)
				continue
			}
			seen[key] = ln
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				c.errorf(ln, "guard %s must be a whole number >= 0, not %q", key, val)
				continue
			}
			switch key {
			case "min_chars":
				g.MinChars = n
			case "max_chars":
				g.MaxChars = n
			case "min_words":
				g.MinWords = n
			case "max_words":
				g.MaxWords = n
			}
		case "contains", "not_contains":
			s, err := guardString(val)
			if err != nil {
				c.errorf(ln, "guard %s: %v", key, err)
				continue
			}
			if key == "contains" {
				g.Contains = append(g.Contains, s)
			} else {
				g.NotContains = append(g.NotContains, s)
			}
		default:
			c.errorf(ln, "unknown guard key %q; keys are %s", key, guardKeys)
		}
	}
	if g.MaxChars > 0 && g.MinChars > g.MaxChars {
		c.errorf(fenceLine, "guard min_chars %d is more than max_chars %d; no output could pass", g.MinChars, g.MaxChars)
	}
	if g.MaxWords > 0 && g.MinWords > g.MaxWords {
		c.errorf(fenceLine, "guard min_words %d is more than max_words %d; no output could pass", g.MinWords, g.MaxWords)
	}
	return g
}

const guardKeys = "min_chars, max_chars, min_words, max_words, contains, not_contains"

// guardString accepts a bare or double-quoted string; quoting is how an
// author includes leading spaces or a colon-looking value unambiguously.
func guardString(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		s, err := strconv.Unquote(v)
		if err != nil {
			return "", fmt.Errorf("bad quoted string %s", v)
		}
		v = s
	}
	if v == "" {
		return "", fmt.Errorf("needs a non-empty string")
	}
	return v, nil
}
