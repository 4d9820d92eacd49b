package bridge_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// manifestScopes is every bot scope Holdfast uses and why; the manifest must
// ask for exactly these (SPEC §5). The README's table says the same.
var manifestScopes = map[string]string{
	"app_mentions:read": "the app_mention event: mentions in channels",
	"channels:history":  "message.channels (replies in bound threads) and conversations.replies/history in public channels (exactly-once lookups)",
	"groups:history":    "the same in private channels",
	"im:history":        "message.im (DMs) and lookups in DMs",
	"mpim:history":      "message.mpim (group DMs)",
	"chat:write":        "chat.postMessage, chat.update, chat.postEphemeral",
	"chat:write.public": "hold cards in a SLACK_HOLDS_CHANNEL the bot was not invited to",
	"commands":          "the /holdfast slash command and the run_workflow shortcut",
	"users:read":        "users.info: mentions recorded by display name",
}

// manifestEvents is every event the bridge handles.
var manifestEvents = []string{"app_home_opened", "app_mention", "message.channels", "message.groups", "message.im", "message.mpim"}

// yamlList answers the items of the list under key (a "key:" line followed
// by "- item" lines further indented), in order.
func yamlList(t *testing.T, manifest, key string) []string {
	t.Helper()
	lines := strings.Split(manifest, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != key+":" {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		var out []string
		for _, item := range lines[i+1:] {
			trimmed := strings.TrimSpace(item)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			if len(item)-len(strings.TrimLeft(item, " ")) <= indent {
				break
			}
			if v, ok := strings.CutPrefix(trimmed, "- "); ok {
				out = append(out, v)
			}
		}
		return out
	}
	t.Fatalf("manifest has no %s list", key)
	return nil
}

// TestManifestAsksForWhatIsUsed: the app manifest asks for exactly the
// scopes and events Holdfast uses, enables interactivity and the Home tab,
// and declares the slash command and the shortcut the bridge answers.
func TestManifestAsksForWhatIsUsed(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../slack-app-manifest.yaml")
	require.NoError(t, err)
	m := string(b)
	scopes := yamlList(t, m, "bot")
	var want []string
	for s := range manifestScopes {
		want = append(want, s)
	}
	slices.Sort(want)
	got := slices.Clone(scopes)
	slices.Sort(got)
	require.Equal(t, want, got, "exactly the scopes used")
	events := slices.Clone(yamlList(t, m, "bot_events"))
	slices.Sort(events)
	require.Equal(t, manifestEvents, events, "exactly the events handled")
	for _, line := range []string{
		"home_tab_enabled: true", "messages_tab_enabled: true",
		"- command: /holdfast", "callback_id: run_workflow", "type: message",
		"interactivity:\n    is_enabled: true", "socket_mode_enabled: true",
	} {
		require.Contains(t, m, line)
	}
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for s := range manifestScopes {
		require.Contains(t, string(readme), "`"+s+"`", "the README says why %s is needed", s)
	}
}
