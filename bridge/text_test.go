package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// TestSlackTextRecordedAsMarkdown: what people write in Slack is kept in
// the transcript as markdown — links, mentions by display name (users.info,
// cached), channels, special mentions, entities — with the raw text beside
// it (SPEC §5), for mentions and for later thread messages alike.
func TestSlackTextRecordedAsMarkdown(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	tb.slack.AddUser(fakeslack.User{ID: "U2", Name: "grace", RealName: "Grace Hopper", DisplayName: "grace"})
	tb.slack.AddUser(fakeslack.User{ID: "U3", Name: "ada", RealName: "Ada Lovelace"})
	tb.slack.AddUser(fakeslack.User{ID: "U1", Name: "u1", DisplayName: "Uno"})
	root := tb.ts()
	tb.event(t, "EvM0", mention("CM", "U1", root, "", "hello"))
	tb.inboxDrained(t)
	ses := tb.threadSession(t, "CM", root)
	for i, tc := range []struct {
		name, raw, want string
	}{
		{"LinkWithLabel", "see <https://example.com/a?b=1&amp;c=2|the docs>", "see [the docs](https://example.com/a?b=1&c=2)"},
		{"BareLink", "<https://example.com>", "https://example.com"},
		{"Mail", "<mailto:a@b.example|a@b.example>", "[a@b.example](mailto:a@b.example)"},
		{"UserByDisplayName", "ask <@U2> please", "ask @grace please"},
		{"UserByRealName", "<@U3> knows", "@Ada Lovelace knows"},
		{"UnknownUserWithLabel", "<@U9|someone>", "@someone"},
		{"UnknownUser", "<@U9>", "@U9"},
		{"Channel", "in <#C123|general>", "in #general"},
		{"Here", "<!here> look", "@here look"},
		{"UserGroup", "<!subteam^S1|@oncall>", "@oncall"},
		{"Date", "<!date^1392734382^{date}|Feb 18, 2014>", "Feb 18, 2014"},
		{"Entities", "a &lt;b&gt; &amp; c &amp;lt;", "a <b> & c &lt;"},
		{"Bold", "this is *important*, see <https://x.example|*the docs*>", "this is **important**, see [*the docs*](https://x.example)"},
		{"Strike", "~not this~ `*code*`", "~~not this~~ `*code*`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := tb.ts()
			tb.event(t, "EvMD"+tc.name, message("CM", "U1", ts, root, tc.raw))
			var ev *store.Event
			tb.eventually(t, func() bool {
				evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: ses.ID, Types: []string{"user_message"}, Newest: true, Limit: 1})
				if err == nil && len(evs) == 1 && evs[0].Payload["ts"] == ts {
					ev = evs[0]
				}
				return ev != nil
			}, 10*time.Second, "case %d", i)
			require.Equal(t, tc.want, ev.Payload["text"])
			require.Equal(t, tc.raw, ev.Payload["raw"], "the raw text is kept")
		})
	}
	// A mention's text is recorded so too, and its author by name.
	ts := tb.ts()
	tb.event(t, "EvM1", mention("CN", "U1", ts, "", "hello <@U2>, <https://x.example|this>"))
	tb.inboxDrained(t)
	evs, err := tb.store.EventList(tb.ctx, &store.EventListParams{SessionID: tb.threadSession(t, "CN", ts).ID, Types: []string{"user_message"}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "hello @grace, [this](https://x.example)", evs[0].Payload["text"])
	require.Equal(t, "Uno", evs[0].Payload["speaker"])
	require.Contains(t, evs[0].Payload["raw"], "<@"+fakeslack.BotUserID+">")
	// users.info is asked once per user: the rest come from the cache.
	asked := map[string]int{}
	for _, c := range tb.slack.Calls("users.info") {
		asked[c.Form["user"]]++
	}
	require.Equal(t, 1, asked["U2"], "cached")
}

// TestConsoleMessagePostedToThread: a message typed in the console into a
// Slack-bound session is posted into its thread, attributed; Slack's own
// messages are not echoed back.
func TestConsoleMessagePostedToThread(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	u, err := tb.store.UserCreate(tb.ctx, &store.User{Username: "ada", PasswordHash: "x", Role: store.RoleSteward})
	require.NoError(t, err)
	root := tb.ts()
	tb.event(t, "EvC0", mention("CC", "U1", root, "", "hello"))
	tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Session commands") })
	ses := tb.threadSession(t, "CC", root)
	_, err = tb.sessions.Message(tb.ctx, ses.ID, "Looks good <b>to me</b> & ship it", engine.Decider{UserID: u.ID, Username: "ada",
		Role: store.RoleSteward, Via: "console"}, true)
	require.NoError(t, err)
	relayed := tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.HasPrefix(c.Form["text"], "*ada* (console): ") })
	require.Equal(t, "*ada* (console): Looks good &lt;b&gt;to me&lt;/b&gt; &amp; ship it", relayed.Form["text"])
	// The template model's answer goes into the thread too, written as
	// Slack takes commands: a message starting with "/" never reaches us.
	tb.eventually(t, func() bool {
		n := 0
		for _, p := range tb.posts("CC", root) {
			if strings.Contains(text(p), "Session commands: status, terminate, compact.") {
				n++
			}
		}
		return n == 2
	}, 10*time.Second, "answered in Slack's form, to the console message as to the mention")

	// A policy set from the console changes what the thread's next run
	// holds: the thread is told, as it is told of a policy set there.
	_, err = tb.sessions.SetPolicy(tb.ctx, ses.ID, store.PolicyManual, engine.Decider{UserID: u.ID, Username: "ada", Role: store.RoleSteward, Via: "console"})
	require.NoError(t, err)
	notice := tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "set this thread's policy") })
	require.Equal(t, ":gear: *ada* (console) set this thread's policy to `manual`: every output is held for review.", notice.Form["text"])

	// A command typed in the console is said in the thread before its
	// answer, so the answer answers something there.
	_, err = tb.sessions.Message(tb.ctx, ses.ID, "/status", engine.Decider{UserID: u.ID, Username: "ada", Role: store.RoleSteward, Via: "console"}, true)
	require.NoError(t, err)
	asked := tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return c.Form["text"] == "*ada* (console): `/status`" })
	answered := tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Status") && c.TS > asked.TS })
	require.NotEmpty(t, answered.TS)

	// Through the API with a key: the key as its owner named it.
	k, err := tb.store.APIKeyCreate(tb.ctx, &store.APIKey{Name: "nightly digest", Role: store.RoleSteward, KeyHash: "hash-nightly"})
	require.NoError(t, err)
	_, err = tb.sessions.Message(tb.ctx, ses.ID, "Digest is out", engine.Decider{KeyID: k.ID, Role: store.RoleSteward, Via: "api"}, true)
	require.NoError(t, err)
	relayed = tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Digest is out") })
	require.Equal(t, "*API key “nightly digest”* (api): Digest is out", relayed.Form["text"])
	tb.quiet(t)
	for _, p := range tb.posts("CC", root) {
		require.NotContains(t, p.Form["text"], "hello", "the Slack message itself is not echoed")
	}
}
