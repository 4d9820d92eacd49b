package engine

import (
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
