package sessions

import (
	"strings"

	"github.com/holdfast-bot/holdfast/store"
)

// Where a request to create a session came from. Public surfaces (the JSON
// API and the console) may not mint tags that belong to the Slack bridge or
// the engine, or a caller could squat a Slack thread before the bridge binds
// it; internal callers (Via empty, "slack", "engine") may.
const (
	ViaAPI     = "api"
	ViaConsole = "console"
	ViaCLI     = "cli"
	ViaSlack   = "slack"
	ViaEngine  = "engine"
)

// Source describes who is creating a session; origin is derived from it and
// from the tags, never taken from input.
type Source struct {
	Via string
	// Agent marks sessions created through POST /api/internal/sessions.
	Agent    bool
	UserID   string
	Username string
	// KeyID is set when the caller used an API key.
	KeyID string
}

// UID names the creating identity the way auth.Identity.UID names a caller
// ("key:<id>" for an API key, "user:<id>" for a console user), for the public
// surfaces whose callers authenticate; sessions other callers make (the
// Slack bridge, the engine, the CLI) have none.
func (src Source) UID() string {
	if src.Via != ViaAPI && src.Via != ViaConsole {
		return ""
	}
	switch {
	case src.KeyID != "":
		return "key:" + src.KeyID
	case src.UserID != "":
		return "user:" + src.UserID
	}
	return ""
}

// channelPlatforms maps a tag prefix to the platform a channel session shows
// in its badge. Only known platforms count: a user tag such as "project:x"
// must not turn a session into a channel session.
var channelPlatforms = map[string]string{"slack": "slack"}

// Tag prefixes reserved to internal callers.
const (
	tagSlack    = "slack:"
	tagWorkflow = "workflow:"
)

// Classify is the one place a session's origin is decided (SPEC §3): a
// platform tag makes a channel session (with that platform), a workflow: tag
// a workflow session, then an agent, an API-key caller, else a person. ctx is
// accepted so context-based provenance can join here without new call sites;
// no context key decides origin today, because API callers write context
// freely and must not be able to claim a channel origin with it.
func Classify(tags []string, ctx map[string]any, src Source) (origin, platform string) {
	for _, t := range tags {
		prefix, _, ok := strings.Cut(t, ":")
		if !ok {
			continue
		}
		if p, ok := channelPlatforms[prefix]; ok {
			return store.OriginChannel, p
		}
		if prefix+":" == tagWorkflow {
			return store.OriginWorkflow, ""
		}
	}
	switch {
	case src.Agent:
		return store.OriginAgent, ""
	case src.KeyID != "":
		return store.OriginAPI, ""
	default:
		return store.OriginUser, ""
	}
}

// checkTags refuses reserved tags from public surfaces.
func checkTags(tags []string, src Source) error {
	if src.Via != ViaAPI && src.Via != ViaConsole {
		return nil
	}
	for _, t := range tags {
		if strings.HasPrefix(t, tagSlack) || strings.HasPrefix(t, tagWorkflow) {
			return invalidf("tag %q is reserved (slack: and workflow: tags are minted by the Slack bridge and the engine)", t)
		}
	}
	return nil
}

// ValidOrigin reports whether o is one of the five origins.
func ValidOrigin(o string) bool {
	switch o {
	case store.OriginChannel, store.OriginUser, store.OriginWorkflow, store.OriginAPI, store.OriginAgent:
		return true
	}
	return false
}

// DefaultOrigins are what the listing shows unless asked otherwise: sessions
// people started, not background ones.
var DefaultOrigins = []string{store.OriginUser, store.OriginChannel}
