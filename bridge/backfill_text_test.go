package bridge_test

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

// TestBackfilledTextRecordedAsLive: a thread's earlier messages, fetched by
// the backfill when the bot joins the thread, are recorded exactly as the
// same messages are when they arrive live (SPEC §5): markdown text (links,
// mentions by display name, channels, special mentions, entities), Slack's
// raw text beside it, the speaker by display name; and a summary of the
// thread quotes them as links and names, not as escaped Slack markup.
func TestBackfilledTextRecordedAsLive(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	people(tb)
	tb.slack.SetUser("UBOB", "bob", "Bob", "Bob Jones")
	cases := []struct{ name, user, raw, want string }{
		{"LinkAndMention", "U1", "Agree, see <https://ex.com/c|census doc> cc <@UBOB>", "Agree, see [census doc](https://ex.com/c) cc @Bob"},
		{"BareLink", "U2", "<https://example.com/a?b=1&amp;c=2>", "https://example.com/a?b=1&c=2"},
		{"Channel", "U1", "moved to <#C123|general>", "moved to #general"},
		{"Here", "U2", "<!here> look", "@here look"},
		{"UnknownUserWithLabel", "U1", "ask <@U9|someone>", "ask @someone"},
		{"Entities", "U2", "a &lt;b&gt; &amp; c", "a <b> & c"},
	}

	// Live: a thread the bot is in from its start hears each message.
	live := tb.ts()
	tb.event(t, "EvBL0", mention("CB", "U1", live, "", "hello"))
	for _, tc := range cases {
		tb.event(t, "EvBL"+tc.name, message("CB", tc.user, tb.ts(), live, tc.raw))
	}
	// Backfilled: the same messages in a thread the bot joins later, with
	// one of its own earlier posts among them.
	root := tb.ts()
	tb.slack.Seed(fakeslack.Message{Channel: "CB", TS: root, User: "U1", Text: "Where is the census?"})
	for _, tc := range cases {
		tb.slack.Seed(fakeslack.Message{Channel: "CB", TS: tb.ts(), ThreadTS: root, User: tc.user, Text: tc.raw})
	}
	botRaw := "Queued <https://holdfast.test/items/1|item 1> for <@UBOB>"
	tb.slack.Seed(fakeslack.Message{Channel: "CB", TS: tb.ts(), ThreadTS: root, User: fakeslack.BotUserID, BotID: fakeslack.BotID, Text: botRaw})
	tb.event(t, "EvB1", mention("CB", "U2", tb.ts(), root, "summarize-thread"))

	summary := text(tb.summaryPost(t, "CB", root))
	requireInOrder(t, summary, "*Ada*: Agree, see <https://ex.com/c|census doc> cc @Bob", "*Bob Babbage*: <https://example.com/a?b=1&amp;c=2>",
		"*Holdfast*: Queued <https://holdfast.test/items/1|item 1> for @Bob")
	require.NotContains(t, summary, "&lt;https://ex.com", "Slack markup is not quoted back escaped")

	// byRaw finds the user message recorded from raw in a thread.
	byRaw := func(evs []*store.Event, raw string) *store.Event {
		for _, e := range evs {
			if e.Payload["raw"] == raw {
				return e
			}
		}
		return nil
	}
	var liveEvs []*store.Event
	tb.eventually(t, func() bool {
		evs, err := threadEvents(tb.store, "CB", live)
		if err != nil {
			return false
		}
		for _, tc := range cases {
			if byRaw(evs, tc.raw) == nil {
				return false
			}
		}
		liveEvs = evs
		return true
	}, 10*time.Second, "every live message is recorded")
	backEvs := tb.transcript(t, "CB", root)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, b := byRaw(liveEvs, tc.raw), byRaw(backEvs, tc.raw)
			require.NotNil(t, b, "the backfilled message keeps its raw text; recorded: %v", backfilled(backEvs))
			require.Equal(t, tc.want, b.Payload["text"], "recorded as markdown")
			require.Equal(t, true, b.Payload["backfilled"])
			require.Equal(t, []string{l.Type, l.Actor}, []string{b.Type, b.Actor})
			// But for when it was said and that it was backfilled, the
			// record is the live one.
			lp, bp := maps.Clone(l.Payload), maps.Clone(b.Payload)
			delete(lp, "ts")
			delete(bp, "ts")
			delete(bp, "backfilled")
			require.Equal(t, lp, bp)
		})
	}
	own := byRaw(backEvs, botRaw)
	require.NotNil(t, own, "the bot's own earlier post keeps its raw text too")
	require.Equal(t, store.EventAssistantMessage, own.Type)
	require.Equal(t, "Queued [item 1](https://holdfast.test/items/1) for @Bob", own.Payload["text"])
	require.Equal(t, "Holdfast", own.Payload["speaker"])
}
