package workflow

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine/search"
	"github.com/holdfast-bot/holdfast/store"
)

const (
	triggerFields = "Command, Invoke, Status, Summary"
	loadFields    = "Gate, Hook, Trigger, Search, Thread, Edges"
	policyFields  = "Approval, Destination, Model, Gate label, Timeout, Retries, Self approval, Approvals, Hold timeout, On timeout, Token budget, Remind after"

	// Slack caps slash commands at 32 characters including the slash; a
	// longer Command could never be typed there.
	maxCommandLen = 32
	maxRetries    = 10
	maxApprovals  = 20
	// maxTokenBudget is far past any one run's spend; a larger number is
	// a typo, not a budget.
	maxTokenBudget = 1_000_000_000
	// maxEdgesWindow bounds an Edges load's look back.
	maxEdgesWindow = 366 * 24 * time.Hour
)

var (
	commandRe     = regexp.MustCompile(`^/[a-z0-9_-]+$`)
	payloadPathRe = regexp.MustCompile(`^payload(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
	openAIModelRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`)
	// Days and weeks, which Go's durations lack; memo search's since:
	// takes the same (search.ParseSince).
	daysDurationRe = regexp.MustCompile(`^([0-9]+)([dw])$`)
)

func (c *compiler) trigger(s *section) {
	seen := map[string]int{}
	for _, f := range c.fields(s, triggerFields) {
		switch f.name {
		case "command", "invoke", "status", "summary":
		default:
			c.unknownField(f, "Trigger", triggerFields)
			continue
		}
		if !c.once(seen, f, "Trigger") {
			continue
		}
		switch f.name {
		case "command":
			c.command(f)
		case "invoke":
			c.m.Invoke = f.value
			sched, err := parseInvoke(f.value)
			if err != nil {
				c.errorf(f.line, "%s", err)
			}
			c.m.Schedule = sched
		case "status":
			v := strings.ToLower(f.value)
			switch v {
			case StatusLive, StatusPaused, StatusDraft:
				c.m.Status = v
			case "":
				c.errorf(f.line, "Status is empty; use live, paused or draft")
			default:
				c.errorf(f.line, "bad Status %q; use live (accepts enqueues), paused or draft", f.value)
			}
		case "summary":
			c.m.Summary = f.value
		}
	}
	if _, ok := seen["command"]; !ok {
		c.errorf(s.line, "missing Command in ## Trigger; add `- **Command** `/your-command``")
	}
	if _, ok := seen["status"]; !ok {
		c.errorf(s.line, "missing Status in ## Trigger; add `- **Status** `live`` (or paused, draft)")
	}
}

func (c *compiler) command(f field) {
	v := f.value
	switch {
	case v == "":
		c.errorf(f.line, "Command is empty; give a slash name like /draft-memo")
	case !strings.HasPrefix(v, "/"):
		c.errorf(f.line, "Command %q is not a slash name; write it with a leading slash, like /%s", v, strings.ToLower(strings.Join(strings.Fields(v), "-")))
	case len(v) > maxCommandLen:
		c.errorf(f.line, "Command %q is longer than %d characters, which Slack does not allow", v, maxCommandLen)
	case !commandRe.MatchString(v):
		c.errorf(f.line, "Command %q is not a slash name; after the slash use only lowercase letters, digits, - and _", v)
	default:
		c.m.Command = v
	}
}

func (c *compiler) loads(s *section) {
	threadLine, edgesAt := 0, 0
	for _, f := range c.fields(s, loadFields) {
		var class string
		switch f.name {
		case "gate":
			class = LoadGate
		case "hook":
			class = LoadHook
		case "trigger":
			class = LoadTrigger
		case "search":
			class = LoadSearch
		case "thread":
			class = LoadThread
		case "edges":
			class = LoadEdges
		default:
			c.unknownField(f, "Load Contract", loadFields)
			continue
		}
		if f.value == "" && class != LoadThread { // a Thread's value only describes it
			c.errorf(f.line, "%s load is empty; name what to load", f.raw)
			continue
		}
		switch class {
		case LoadThread:
			if threadLine != 0 {
				c.errorf(f.line, "Thread is loaded once; remove this line (the first is at line %d)", threadLine)
				continue
			}
			threadLine = f.line
		case LoadSearch:
			if _, err := search.Parse(f.value); err != nil {
				c.errorf(f.line, "Search %q does not parse: %s", f.value, store.ReasonOf(err))
				continue
			}
		case LoadGate, LoadHook:
			if c.opts.MemoExists != nil && !c.opts.MemoExists(f.value) {
				c.errorf(f.line, "%s memo %q does not exist; %s memos always load, so create a memo with that title or fix the name", f.raw, f.value, f.raw)
				continue
			}
		case LoadTrigger:
			if !payloadPathRe.MatchString(f.value) {
				c.errorf(f.line, "Trigger load %q must name a payload field, like payload.targetMemoId", f.value)
				continue
			}
		case LoadEdges:
			d, err := parseDuration(f.value)
			switch {
			case err != nil:
				c.errorf(f.line, "bad Edges window %q: %v; write how far back to look, like 7d or 24h", f.value, err)
				continue
			case d <= 0:
				c.errorf(f.line, "Edges window %q looks back over nothing; write how far back to look, like 7d or 24h", f.value)
				continue
			case d > maxEdgesWindow:
				c.errorf(f.line, "Edges window %q is longer than a year; look back at most 366d", f.value)
				continue
			case edgesAt > 0:
				c.errorf(f.line, "duplicate Edges load (first at line %d); a workflow loads one edges report", edgesAt)
				continue
			}
			edgesAt = f.line
		}
		c.m.Loads = append(c.m.Loads, Load{Class: class, Value: f.value, Line: f.line})
	}
}

func (c *compiler) policy(s *section) {
	seen := map[string]int{}
	p := &c.m.Policy
	for _, f := range c.fields(s, policyFields) {
		switch f.name {
		case "approval", "destination", "model", "gate label", "timeout", "retries",
			"self approval", "approvals", "hold timeout", "on timeout", "token budget", "remind after":
		default:
			c.unknownField(f, "Policy", policyFields)
			continue
		}
		if !c.once(seen, f, "Policy") {
			continue
		}
		v := strings.ToLower(f.value)
		switch f.name {
		case "approval":
			switch v {
			case ApprovalAuto, ApprovalHold:
				p.Approval = v
			default:
				c.errorf(f.line, "bad Approval %q; use auto (dispatch at once) or hold (wait for a steward)", f.value)
			}
		case "destination":
			switch v {
			case DestinationMemo, DestinationReply:
				p.Destination = v
			case "worktree":
				c.errorf(f.line, "destination worktree is not supported; use memo or reply")
			default:
				c.errorf(f.line, "unknown Destination %q; use memo or reply", f.value)
			}
		case "model":
			if m, err := parseModel(f.value); err != nil {
				c.errorf(f.line, "%s", err)
			} else {
				p.Model = m
			}
		case "gate label":
			p.GateLabel = f.value
		case "timeout":
			if d, ok := c.duration(f); ok {
				p.Timeout = d
			}
		case "hold timeout":
			if d, ok := c.duration(f); ok {
				p.HoldTimeout = d
			}
		case "remind after":
			if d, ok := c.duration(f); ok {
				p.RemindAfter = d
			}
		case "retries":
			if n, ok := c.intIn(f, 0, maxRetries); ok {
				p.Retries = n
			}
		case "approvals":
			if n, ok := c.intIn(f, 1, maxApprovals); ok {
				p.Approvals = n
			}
		case "token budget":
			if n, ok := c.tokenBudget(f); ok {
				p.TokenBudget = n
			}
		case "self approval":
			switch v {
			case "allowed":
				p.SelfApproval = true
			case "refused":
				p.SelfApproval = false
			default:
				c.errorf(f.line, "bad Self approval %q; use allowed or refused", f.value)
			}
		case "on timeout":
			switch v {
			case OnTimeoutReject, OnTimeoutApprove:
				p.OnTimeout = v
			default:
				c.errorf(f.line, "bad On timeout %q; use reject or approve", f.value)
			}
		}
	}
	if line, ok := seen["on timeout"]; ok {
		if _, has := seen["hold timeout"]; !has {
			c.errorf(line, "On timeout has no effect without a Hold timeout; add `- **Hold timeout** `24h`` or remove it")
		}
	}
}

// parseModel accepts the providers SPEC §4.5 knows; an empty value keeps the
// service default.
func parseModel(v string) (string, error) {
	switch lv := strings.ToLower(v); {
	case v == "":
		return "", nil
	case lv == ModelTemplate:
		return ModelTemplate, nil
	case lv == "openai" || lv == "openai:":
		return "", fmt.Errorf("model %q names no model; write openai:<model>, like openai:gpt-4o-mini", v)
	case strings.HasPrefix(lv, "openai:"):
		name := v[len("openai:"):]
		if !openAIModelRe.MatchString(name) {
			return "", fmt.Errorf("bad model name %q in %q; write openai:<model> with no spaces", name, v)
		}
		return "openai:" + name, nil
	default:
		return "", fmt.Errorf("bad model spec %q; use template or openai:<model>", v)
	}
}

// duration accepts Go durations plus whole days ("2d"), since hold timeouts
// are naturally written in days; 0 or "none" mean no limit.
func (c *compiler) duration(f field) (time.Duration, bool) {
	d, err := parseDuration(f.value)
	if err != nil {
		c.errorf(f.line, "bad %s %q: %v", f.raw, f.value, err)
		return 0, false
	}
	return d, true
}

func parseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "":
		return 0, fmt.Errorf("empty; write a duration like 90s, 2m or 24h")
	case "0", "none":
		return 0, nil
	}
	if m := daysDurationRe.FindStringSubmatch(v); m != nil {
		n, err := strconv.Atoi(m[1])
		if err == nil && m[2] == "w" && n <= 365*100 {
			n *= 7
		}
		if err != nil || n > 365*100 {
			return 0, fmt.Errorf("too long")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration; write one like 90s, 2m, 1h30m or 24h")
	}
	if d < 0 {
		return 0, fmt.Errorf("negative; write a positive duration, or 0 for none")
	}
	return d, nil
}

// tokenBudget reads a whole number of tokens; thousands may be grouped
// with commas or underscores (10,000), and 0 or none means no budget.
func (c *compiler) tokenBudget(f field) (int64, bool) {
	v := strings.NewReplacer(",", "", "_", "").Replace(strings.TrimSpace(f.value))
	if strings.EqualFold(v, "none") || v == "0" {
		return 0, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > maxTokenBudget {
		c.errorf(f.line, "bad Token budget %q; write a whole number of tokens from 1 to %d (or none), like 10000", f.value, maxTokenBudget)
		return 0, false
	}
	return n, true
}

// EdgesWindow is an Edges load's window, as the compiler accepted it.
func EdgesWindow(v string) (time.Duration, error) { return parseDuration(v) }

func (c *compiler) intIn(f field, lo, hi int) (int, bool) {
	n, err := strconv.Atoi(f.value)
	if err != nil || n < lo || n > hi {
		c.errorf(f.line, "bad %s %q; use a whole number from %d to %d", f.raw, f.value, lo, hi)
		return 0, false
	}
	return n, true
}
