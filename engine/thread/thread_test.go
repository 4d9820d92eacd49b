package thread_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/thread"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

func open(tb testing.TB) store.Store {
	tb.Helper()
	return testdb.Open(tb, testdb.Options{SQLiteSync: "normal"})
}

func newSession(tb testing.TB, db store.Store) string {
	tb.Helper()
	ses, err := db.SessionCreate(context.Background(), &store.SessionCreateParams{Origin: store.OriginChannel, Platform: "slack",
		Tags: []string{"slack:C1:" + fmt.Sprint(time.Now().UnixNano())}, Policy: store.PolicyAuto})
	require.NoError(tb, err)
	return ses.ID
}

func appendAll(tb testing.TB, db store.Store, id string, evs ...*store.EventAppendParams) {
	tb.Helper()
	_, _, err := db.SessionUpdate(context.Background(), &store.SessionUpdateParams{ID: id, Events: evs})
	require.NoError(tb, err)
}

func msg(typ, actor string, payload map[string]any) *store.EventAppendParams {
	return &store.EventAppendParams{Type: typ, Actor: actor, Payload: payload}
}

func said(msgs []workflow.ThreadMessage) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, m.Speaker+": "+m.Text)
	}
	return out
}

func TestLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NoSessionIsEmpty", func(t *testing.T) {
		t.Parallel()
		msgs, err := thread.Load(ctx, open(t), "")
		require.NoError(t, err)
		require.NotNil(t, msgs)
		require.Empty(t, msgs)
	})

	t.Run("SpeakersAndOrder", func(t *testing.T) {
		t.Parallel()
		db := open(t)
		id := newSession(t, db)
		require.NoError(t, db.SlackUserPut(ctx, &store.SlackUser{ID: "U2", Name: "Bob"}))
		u, err := db.UserCreate(ctx, &store.User{Username: "carol", PasswordHash: "x", Role: store.RoleViewer})
		require.NoError(t, err)
		appendAll(t, db, id,
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "summarize-thread", "speaker": "Ada", "ts": "1700000100.000000"}),
			msg("run_started", "engine", map[string]any{"runId": "r"}),
			msg(store.EventUserMessage, "slack:U2", map[string]any{"text": "from the cache", "ts": "1700000101.000000"}),
			msg(store.EventUserMessage, "slack:U3", map[string]any{"text": "nobody knows me"}),
			msg(store.EventUserMessage, "user:"+u.ID, map[string]any{"text": "from the console"}),
			msg(store.EventAssistantMessage, "engine", map[string]any{"text": "a reply", "runId": "r"}),
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "   "}),
		)
		// The backfill lands after the mention was handled, newest page
		// first even; it is still the start of the conversation.
		appendAll(t, db, id,
			msg(store.EventUserMessage, "slack:U2", map[string]any{"text": "second", "ts": "1700000002.000000", "backfilled": true}),
			msg(store.EventAssistantMessage, "slack:UBOT", map[string]any{"text": "bot said", "ts": "1700000003.000000", "backfilled": true}),
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "first", "ts": "1700000001.000000", "backfilled": true, "speaker": "Ada"}),
		)
		msgs, err := thread.Load(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, []string{"Ada: first", "Bob: second", "Holdfast: bot said", "Ada: summarize-thread", "Bob: from the cache",
			"U3: nobody knows me", "carol: from the console", "Holdfast: a reply"}, said(msgs))
		require.Equal(t, time.Unix(1700000001, 0).UTC(), msgs[0].TS, "a Slack message is dated by its ts")
		require.Equal(t, "Ada: first\nBob: second\n", thread.Lines(msgs[:2]))
	})

	t.Run("NewestMessagesOnly", func(t *testing.T) {
		t.Parallel()
		db := open(t)
		id := newSession(t, db)
		var evs []*store.EventAppendParams
		for i := range thread.MaxMessages + 30 {
			evs = append(evs, msg(store.EventUserMessage, "slack:U1", map[string]any{"text": fmt.Sprint("live ", i), "speaker": "Ada"}))
		}
		appendAll(t, db, id, evs...)
		evs = nil
		for i := range 40 {
			evs = append(evs, msg(store.EventUserMessage, "slack:U2", map[string]any{"text": fmt.Sprint("old ", i), "speaker": "Bob",
				"backfilled": true, "ts": fmt.Sprintf("1700000000.%06d", i)}))
		}
		appendAll(t, db, id, evs...) // recorded last, said first
		msgs, err := thread.Load(ctx, db, id)
		require.NoError(t, err)
		require.Len(t, msgs, thread.MaxMessages)
		require.Equal(t, "live 30", msgs[0].Text, "the newest 200 of the conversation, though the backfill was recorded last")
		require.Equal(t, fmt.Sprint("live ", thread.MaxMessages+29), msgs[len(msgs)-1].Text)
	})

	// Slack edits and deletions (message_changed, message_deleted) change
	// the conversation as people now see it in Slack: the latest edit in
	// the message's place, a deleted message gone, a backfilled message
	// alike; only its speaker's change counts.
	t.Run("EditsAndDeletions", func(t *testing.T) {
		t.Parallel()
		db := open(t)
		id := newSession(t, db)
		edit := func(actor, ts, text string) *store.EventAppendParams {
			return msg("message_edited", actor, map[string]any{"ts": ts, "text": text})
		}
		appendAll(t, db, id,
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "otters eat fish", "speaker": "Ada", "ts": "1700000100.000000"}),
			msg(store.EventUserMessage, "slack:U2", map[string]any{"text": "my password is hunter2", "speaker": "Bob", "ts": "1700000101.000000"}),
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "otters are weasels", "speaker": "Ada", "ts": "1700000102.000000"}),
			msg(store.EventUserMessage, "slack:U2", map[string]any{"text": "old", "speaker": "Bob", "ts": "1700000001.000000", "backfilled": true}),
			edit("slack:U1", "1700000100.000000", "otters eat crabs"),
			msg("message_deleted", "slack:U2", map[string]any{"ts": "1700000101.000000"}),
			edit("slack:U2", "1700000101.000000", "an edit after the deletion"),
			edit("slack:U1", "1700000100.000000", "otters eat crabs and fish"),
			edit("slack:U3", "1700000102.000000", "not U3's message to change"),
			edit("slack:U2", "1700000001.000000", "old, edited"),
		)
		msgs, err := thread.Load(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, []string{"Bob: old, edited", "Ada: otters eat crabs and fish", "Ada: otters are weasels"}, said(msgs))

		evs, err := db.EventList(ctx, &store.EventListParams{SessionID: id, Limit: 100})
		require.NoError(t, err)
		ordered := thread.Order(evs)
		require.Len(t, ordered, 3, "the chat turn's history reads the same conversation, edit events taken out")
		require.Equal(t, "otters eat fish", evs[0].Payload["text"], "the transcript as recorded is not touched")
	})

	t.Run("CharacterBound", func(t *testing.T) {
		t.Parallel()
		db := open(t)
		id := newSession(t, db)
		long := strings.Repeat("é", 20_000)
		appendAll(t, db, id,
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": "dropped " + long, "speaker": "Ada"}),
			msg(store.EventUserMessage, "slack:U1", map[string]any{"text": long, "speaker": "Ada"}),
			msg(store.EventUserMessage, "slack:U2", map[string]any{"text": long, "speaker": "Bob"}),
		)
		msgs, err := thread.Load(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, []string{"Ada", "Bob"}, []string{msgs[0].Speaker, msgs[1].Speaker}, "the newest that fit in 50,000 characters")

		appendAll(t, db, id, msg(store.EventUserMessage, "slack:U2", map[string]any{"text": strings.Repeat("x", thread.MaxChars+10), "speaker": "Bob"}))
		msgs, err = thread.Load(ctx, db, id)
		require.NoError(t, err)
		require.Len(t, msgs, 1, "a newest message past the bound is all there is room for")
		require.Equal(t, thread.MaxChars, len([]rune(msgs[0].Text)))
		require.True(t, strings.HasSuffix(msgs[0].Text, "…"))
	})
}

func TestParseSlackTS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"1700000000.000123", time.Unix(1700000000, 123000).UTC(), true},
		{"1700000000.5", time.Unix(1700000000, 500_000_000).UTC(), true},
		{"1700000000", time.Unix(1700000000, 0).UTC(), true},
		{"", time.Time{}, false},
		{"x.1", time.Time{}, false},
		{"1.x", time.Time{}, false},
		{"-1.0", time.Time{}, false},
	} {
		got, ok := thread.ParseSlackTS(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

// session200 is a session holding a 200-message conversation between two
// Slack users whose names are cached but not recorded with the messages
// (the slower path: every speaker is looked up once), among run events.
func session200(tb testing.TB) (store.Store, string) {
	db := open(tb)
	ctx := context.Background()
	id := newSession(tb, db)
	require.NoError(tb, db.SlackUserPut(ctx, &store.SlackUser{ID: "U1", Name: "Ada"}))
	require.NoError(tb, db.SlackUserPut(ctx, &store.SlackUser{ID: "U2", Name: "Bob"}))
	var evs []*store.EventAppendParams
	for i := range thread.MaxMessages {
		evs = append(evs, msg(store.EventUserMessage, fmt.Sprint("slack:U", 1+i%2), map[string]any{
			"text": fmt.Sprintf("message %d about the otters in the estuary and who counts them this week", i),
			"ts":   fmt.Sprintf("1700000000.%06d", i)}))
		if i%10 == 0 {
			evs = append(evs, msg("run_step", "engine", map[string]any{"runId": "r", "step": i}))
		}
	}
	appendAll(tb, db, id, evs...)
	return db, id
}

// TestLoad200IsFast: issue 11's bound, a 200-message thread loads in under
// 2 ms. Other packages' tests share the machine's two cores (CI has seen
// them make every load 6× slower for a whole second, and a PostgreSQL
// round trip wait for its server to get a core), so the load is judged
// against the store reads it cannot do without, timed in the same rounds:
// one read of the events and one lookup per speaker. Its own work (names,
// ordering, trimming) must stay a fraction of those reads, which a store
// call per message or a quadratic pass breaks at any load; and whenever
// those reads alone leave room for the bound, the load must meet it.
func TestLoad200IsFast(t *testing.T) {
	t.Parallel()
	db, id := session200(t)
	ctx := context.Background()
	bound := 2 * time.Millisecond * raceSlowdown
	var load, reads []time.Duration
	for range 3 * 21 {
		start := time.Now()
		msgs, err := thread.Load(ctx, db, id)
		load = append(load, time.Since(start))
		require.NoError(t, err)
		require.Len(t, msgs, thread.MaxMessages)
		start = time.Now()
		_, err = thread.Events(ctx, db, id, thread.MaxMessages)
		require.NoError(t, err)
		for _, u := range []string{"U1", "U2"} {
			_, err = db.SlackUserGet(ctx, u)
			require.NoError(t, err)
		}
		reads = append(reads, time.Since(start))
	}
	l, r := median(load), median(reads)
	t.Logf("Thread load of 200 messages: median %v; the reads it needs alone %v (%.2f×)", l, r, float64(l)/float64(r))
	require.Less(t, float64(l)/float64(r), 1.5, "the load's own work beside its store reads")
	if r < bound/2 {
		require.Less(t, l, bound)
	}
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func BenchmarkLoad200(b *testing.B) {
	db, id := session200(b)
	for b.Loop() {
		msgs, err := thread.Load(context.Background(), db, id)
		if err != nil || len(msgs) != thread.MaxMessages {
			b.Fatal(err, len(msgs))
		}
	}
}
