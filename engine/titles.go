package engine

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// titleChars bounds a derived title; a brief's first line can be long.
const titleChars = 120

// RunTitle says what a run is about (SPEC §6: runs lead with a title): its
// payload.title, else the first line of payload.brief, else its workflow's
// command. It is the one rule every surface shows runs by.
func RunTitle(r *store.Run) string {
	if r == nil {
		return ""
	}
	if t := payloadTitle(r.Payload); t != "" {
		return t
	}
	return r.Command
}

// HoldTitle says what is being decided (SPEC §4.3): the output's first #
// heading, else payload.title, else the first line of payload.brief, else
// the gate label, else the workflow's name or command. payload is the held
// run's (nil when unknown). A hold keeps the title it opened with (h.Title,
// derived by this rule), which answers unless an edited output brings a
// heading of its own; holds opened before titles were kept are derived.
func HoldTitle(h *store.Hold, payload map[string]any) string {
	if h == nil {
		return ""
	}
	if h.EditedOutput != nil && *h.EditedOutput != "" {
		if t := clip(strings.TrimSpace(workflow.FirstHeading([]byte(*h.EditedOutput)))); t != "" {
			return t
		}
	}
	if h.Title != "" {
		return h.Title
	}
	if t := clip(strings.TrimSpace(workflow.FirstHeading([]byte(h.Output)))); t != "" {
		return t
	}
	if t := payloadTitle(payload); t != "" {
		return t
	}
	for _, s := range []string{h.GateLabel, h.WorkflowName, h.Command} {
		if s = strings.TrimSpace(s); s != "" {
			return s
		}
	}
	return h.ID
}

func payloadTitle(p map[string]any) string {
	if t, _ := p["title"].(string); strings.TrimSpace(t) != "" {
		return clip(strings.TrimSpace(t))
	}
	if b, _ := p["brief"].(string); strings.TrimSpace(b) != "" {
		line, _, _ := strings.Cut(strings.TrimSpace(b), "\n")
		return clip(strings.TrimSpace(line))
	}
	return ""
}

func clip(s string) string {
	if r := []rune(s); len(r) > titleChars {
		return strings.TrimSpace(string(r[:titleChars-1])) + "…"
	}
	return s
}

// PersonName names an identity as the engine writes it (an item's owner, a
// decider: "slack:U1", "key:key_1", "engine", "cli", a console username)
// for people to read. A surface that knows more (a console user's name, a
// Slack mention) says that instead.
func PersonName(uid string) string {
	switch {
	case uid == "":
		return "unknown"
	case uid == "engine":
		return "the scheduler"
	case uid == "cli":
		return "the command line"
	case strings.HasPrefix(uid, "slack:"):
		return "Slack user " + strings.TrimPrefix(uid, "slack:")
	case strings.HasPrefix(uid, "key:"):
		return "API key " + strings.TrimPrefix(uid, "key:")
	case strings.HasPrefix(uid, "user:"):
		return "a console user"
	default:
		return uid
	}
}

// identities are the uids engine texts name people by ("rejected by
// slack:U1", "already approved by key:key_1", "terminated by user:usr_1").
var identities = regexp.MustCompile(`\b(?:slack:[UWB][A-Z0-9]+|key:key_[a-z0-9]+|user:usr_[a-z0-9]+)\b`)

// PeopleIn names the people an engine text mentions, with name (PersonName
// when nil) for each.
func PeopleIn(text string, name func(uid string) string) string {
	if name == nil {
		name = PersonName
	}
	return identities.ReplaceAllStringFunc(text, name)
}

// FirstLine is s's first line, trimmed, in at most n characters (a cut
// one ends in "…"): how every surface names a long text in one line.
func FirstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		s = strings.TrimSpace(string(r[:max(n-1, 0)])) + "…"
	}
	return s
}

// Names lists names as a sentence does: "ada", "ada and bo", "ada, bo and cy".
func Names(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Count says n things in words: "1 event", "3 events", "1 reply", "2 replies".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
