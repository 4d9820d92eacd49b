package sessions_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

var timeZero time.Time

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		tags             []string
		src              sessions.Source
		origin, platform string
	}{
		{"SlackThread", []string{"slack:C1:1700.1"}, sessions.Source{Via: sessions.ViaSlack}, store.OriginChannel, "slack"},
		{"EngineItem", []string{"workflow:itm_1"}, sessions.Source{Via: sessions.ViaEngine}, store.OriginWorkflow, ""},
		{"Agent", nil, sessions.Source{Agent: true, KeyID: "k"}, store.OriginAgent, ""},
		{"APIKey", nil, sessions.Source{Via: sessions.ViaAPI, KeyID: "key_1"}, store.OriginAPI, ""},
		{"ConsoleUser", nil, sessions.Source{Via: sessions.ViaConsole, UserID: "usr_1"}, store.OriginUser, ""},
		{"CLI", nil, sessions.Source{Via: sessions.ViaCLI}, store.OriginUser, ""},
		{"PlainTagIsNotAPlatform", []string{"project:x"}, sessions.Source{UserID: "u"}, store.OriginUser, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			origin, platform := sessions.Classify(tc.tags, nil, tc.src)
			require.Equal(t, tc.origin, origin)
			require.Equal(t, tc.platform, platform)
		})
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OriginPerSourceAndDefaultPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		ch, err := b.svc.ResolveTag(ctx, "slack:C9:1.1", sessions.CreateParams{Title: "thread", Source: sessions.Source{Via: sessions.ViaSlack}})
		require.NoError(t, err)
		require.Equal(t, store.OriginChannel, ch.Origin)
		require.Equal(t, "slack", ch.Platform)
		require.Equal(t, store.PolicyAuto, ch.Policy, "new sessions start from the default posture")
		again, err := b.svc.ResolveTag(ctx, "slack:C9:1.1", sessions.CreateParams{})
		require.NoError(t, err)
		require.Equal(t, ch.ID, again.ID, "one session per tag")

		api, err := b.svc.Create(ctx, sessions.CreateParams{Title: "by key", Source: sessions.Source{Via: sessions.ViaAPI, KeyID: "key_1"}})
		require.NoError(t, err)
		require.Equal(t, store.OriginAPI, api.Origin)
		require.Equal(t, "key_1", api.CallerKeyID)

		ag, err := b.svc.CreateAgent(ctx, "nightly triage", sessions.Source{})
		require.NoError(t, err)
		require.Equal(t, store.OriginAgent, ag.Origin)
		require.Equal(t, "nightly triage", ag.Title)
		require.Equal(t, []string{store.EventContext}, types(b.events(t, ag.ID)))
		_, err = b.svc.CreateAgent(ctx, "  ", sessions.Source{})
		require.ErrorIs(t, err, store.ErrInvalid)
	})

	t.Run("PublicSurfacesCannotMintReservedTags", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		for _, tag := range []string{"slack:C1:2.2", "workflow:itm_9"} {
			_, err := b.svc.Create(ctx, sessions.CreateParams{Tag: tag, Source: sessions.Source{Via: sessions.ViaAPI, KeyID: "k"}})
			require.ErrorIs(t, err, store.ErrInvalid, tag)
		}
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Tag: "project:otters", Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}})
		require.NoError(t, err)
		require.Equal(t, store.OriginUser, ses.Origin)
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	mk := func(p sessions.CreateParams, tag string, withEvent bool) *store.Session {
		var ses *store.Session
		var err error
		if tag != "" {
			ses, err = b.svc.ResolveTag(ctx, tag, p)
		} else {
			ses, err = b.svc.Create(ctx, p)
		}
		require.NoError(t, err)
		if withEvent {
			_, err = b.svc.AppendEvent(ctx, ses.ID, store.EventUserMessage, "u", map[string]any{"text": "hi"})
			require.NoError(t, err)
		}
		return ses
	}
	user := mk(sessions.CreateParams{Title: "Otter survey", Source: sessions.Source{Via: sessions.ViaConsole, UserID: "u"}}, "", true)
	channel := mk(sessions.CreateParams{Title: "Thread", Source: sessions.Source{Via: sessions.ViaSlack}}, "slack:C1:1.1", true)
	wf := mk(sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaEngine}}, "workflow:itm_1", true)
	api := mk(sessions.CreateParams{Source: sessions.Source{Via: sessions.ViaAPI, KeyID: "k"}}, "", true)
	agent, err := b.svc.CreateAgent(ctx, "agent loop", sessions.Source{})
	require.NoError(t, err)
	empty := mk(sessions.CreateParams{Title: "never used", Source: sessions.Source{UserID: "u"}}, "", false)

	ids := func(p *sessions.Page) []string {
		out := []string{}
		for _, s := range p.Sessions {
			out = append(out, s.ID)
		}
		return out
	}

	page, err := b.svc.List(ctx, sessions.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{channel.ID, user.ID}, ids(page), "default: user and channel only, empty sessions left out")
	require.Empty(t, page.Next)
	require.NotContains(t, ids(page), empty.ID)

	for _, tc := range []struct {
		origins []string
		want    []string
	}{
		{[]string{store.OriginWorkflow}, []string{wf.ID}},
		{[]string{store.OriginAPI, store.OriginAgent}, []string{agent.ID, api.ID}},
		{[]string{store.OriginUser}, []string{user.ID}},
	} {
		page, err := b.svc.List(ctx, sessions.ListParams{Origins: tc.origins})
		require.NoError(t, err)
		require.Equal(t, tc.want, ids(page), "origins %v toggle independently", tc.origins)
	}
	_, err = b.svc.List(ctx, sessions.ListParams{Origins: []string{"wiki"}})
	require.ErrorIs(t, err, store.ErrInvalid)

	_, err = b.svc.Archive(ctx, channel.ID)
	require.NoError(t, err)
	page, err = b.svc.List(ctx, sessions.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{user.ID}, ids(page), "archived sessions are hidden")
	page, err = b.svc.List(ctx, sessions.ListParams{IncludeArchived: true})
	require.NoError(t, err)
	require.Equal(t, []string{channel.ID, user.ID}, ids(page))
	require.True(t, page.Sessions[0].Archived)
	_, err = b.svc.Unarchive(ctx, channel.ID)
	require.NoError(t, err)

	page, err = b.svc.List(ctx, sessions.ListParams{Query: "otter"})
	require.NoError(t, err)
	require.Equal(t, []string{user.ID}, ids(page), "text filter on title")
	page, err = b.svc.List(ctx, sessions.ListParams{Query: "C1:1.1"})
	require.NoError(t, err)
	require.Equal(t, []string{channel.ID}, ids(page), "text filter on tag")
	// An engine-minted tag is not in the text index; typed whole, it is
	// looked up, whatever the origin filter.
	for _, q := range []string{"workflow:itm_1", " workflow:itm_1 "} {
		page, err = b.svc.List(ctx, sessions.ListParams{Query: q})
		require.NoError(t, err)
		require.Equal(t, []string{wf.ID}, ids(page), "%q finds its session", q)
	}
	page, err = b.svc.List(ctx, sessions.ListParams{Query: "workflow:itm_2"})
	require.NoError(t, err)
	require.Empty(t, ids(page), "no session holds that tag")

	// Keyset pages: one row a page, newest activity first, next empty at the end.
	all := []string{}
	cursor := ""
	for range 10 {
		page, err := b.svc.List(ctx, sessions.ListParams{Origins: []string{"user", "channel", "workflow", "api", "agent"}, Cursor: cursor, Limit: 1})
		require.NoError(t, err)
		all = append(all, ids(page)...)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	require.Equal(t, []string{agent.ID, api.ID, wf.ID, channel.ID, user.ID}, all)
	_, err = b.svc.List(ctx, sessions.ListParams{Cursor: "not-a-cursor"})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestForkRestoresEventsAndPostureOfItsMoment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	src, err := b.svc.Create(ctx, sessions.CreateParams{Title: "draft", Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	say := func(text string) *store.Event {
		ev, err := b.svc.AppendEvent(ctx, src.ID, store.EventUserMessage, "user:u", map[string]any{"text": text})
		require.NoError(t, err)
		return ev
	}
	first := say("one")
	_, err = b.svc.SetPolicy(ctx, src.ID, "yolo", user("u"))
	require.NoError(t, err)
	at := say("two")
	_, err = b.svc.SetPolicy(ctx, src.ID, "manual", user("u"))
	require.NoError(t, err)
	say("three")
	cur, err := b.svc.GetByID(ctx, src.ID)
	require.NoError(t, err)
	require.Equal(t, store.PolicyManual, cur.Policy, "policy follows head")

	fork, err := b.svc.Fork(ctx, src.ID, at.TS, sessions.Source{Via: sessions.ViaAPI, KeyID: "key_forker"})
	require.NoError(t, err)
	require.Equal(t, src.ID, fork.ForkedFrom)
	require.Equal(t, "key:key_forker", fork.CreatedBy, "the fork is its forker's")
	require.Equal(t, store.PolicyYolo, fork.Policy, "the fork restores the posture of its moment")
	require.Equal(t, src.Origin, fork.Origin)
	require.Equal(t, "Fork of draft", fork.Title, "told apart from its source in every listing")
	srcEvents := b.events(t, src.ID)
	forkEvents := b.events(t, fork.ID)
	require.Len(t, forkEvents, 3)
	for i, e := range forkEvents {
		require.Equal(t, srcEvents[i].TS, e.TS)
		require.Equal(t, srcEvents[i].Type, e.Type)
		require.Equal(t, srcEvents[i].Payload, e.Payload)
		require.False(t, e.TS.After(at.TS), "only events at or before atTs")
	}

	early, err := b.svc.Fork(ctx, src.ID, first.TS, sessions.Source{})
	require.NoError(t, err)
	require.Equal(t, store.PolicyAuto, early.Policy, "before any policy_set: the posture the session started with")

	_, err = b.svc.Fork(ctx, "ses_missing", at.TS, sessions.Source{})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.svc.Fork(ctx, src.ID, time.Time{}, sessions.Source{})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestEventsAfterReturnsOnlyNewer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	var evs []*store.Event
	for _, s := range []string{"a", "b", "c", "d"} {
		ev, err := b.svc.AppendEvent(ctx, ses.ID, store.EventUserMessage, "u", map[string]any{"text": s})
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	got, err := b.svc.Events(ctx, ses.ID, evs[1].TS, 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, evs[2].ID, got[0].ID)
	require.Equal(t, evs[3].ID, got[1].ID)
	got, err = b.svc.Events(ctx, ses.ID, evs[3].TS, 0)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = b.svc.LatestEvents(ctx, ses.ID, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{evs[2].ID, evs[3].ID}, []int64{got[0].ID, got[1].ID}, "the newest page, oldest first")
	_, err = b.svc.LatestEvents(ctx, "ses_missing", 2)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.svc.Events(ctx, "ses_missing", timeZero, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.svc.Events(ctx, ses.ID, timeZero, sessions.MaxEventPage+1)
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestNormalizePolicy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"manual": "manual", "auto": "auto", "yolo": "yolo", "": "manual", "bogus": "manual", "YOLO": "manual"} {
		require.Equal(t, want, sessions.NormalizePolicy(in), "posture %q", in)
	}
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	got, err := b.svc.SetPolicy(ctx, ses.ID, "YOLO", user("u"))
	require.NoError(t, err)
	require.Equal(t, store.PolicyYolo, got.Policy)
	_, err = b.svc.SetPolicy(ctx, ses.ID, "reckless", user("u"))
	require.ErrorIs(t, err, store.ErrInvalid)
	evs := b.events(t, ses.ID)
	require.Equal(t, []string{store.EventPolicySet}, types(evs), "a refused posture changes nothing")
	require.Equal(t, "yolo", evs[0].Payload["policy"])
	_, err = b.svc.SetPolicy(ctx, "ses_missing", "auto", user("u"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestTemplateTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HelpNamesLiveWorkflows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.liveWorkflow(t, "/draft-memo", "Drafts one memo from a brief")
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		res, err := b.svc.Message(ctx, ses.ID, "hello there", user("u"), false)
		require.NoError(t, err)
		require.NotNil(t, res.Reply)
		require.Contains(t, res.Reply.Payload["text"], "/draft-memo: Drafts one memo from a brief")
		require.Equal(t, []string{store.EventUserMessage, store.EventAssistantMessage}, types(b.events(t, ses.ID)))
		got, err := b.svc.GetByID(ctx, ses.ID)
		require.NoError(t, err)
		require.Equal(t, store.SessionDone, got.Status)
		require.Empty(t, got.ActiveRunID)
		require.Equal(t, "hello there", got.Title, "an untitled session is named by its first message")
	})

	t.Run("SlashCommandEnqueuesWithSession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.liveWorkflow(t, "/draft-memo", "Drafts")
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		res, err := b.svc.Message(ctx, ses.ID, "/draft-memo a memo about otters", user("u"), false)
		require.NoError(t, err)
		require.Contains(t, res.Reply.Payload["text"], "Queued /draft-memo")
		enq, _ := b.eng.snapshot()
		require.Len(t, enq, 1)
		require.Equal(t, engine.EnqueueParams{Command: "/draft-memo", DedupeKey: enq[0].DedupeKey,
			Payload: map[string]any{"brief": "a memo about otters"}, SessionID: ses.ID, OwnerUID: "user:u"}, enq[0])
		require.Equal(t, []string{store.EventUserMessage, store.EventToolResult, store.EventAssistantMessage}, types(b.events(t, ses.ID)))

		res, err = b.svc.Message(ctx, ses.ID, "/nope do it", user("u"), false)
		require.NoError(t, err)
		require.Contains(t, res.Reply.Payload["text"], "There is no /nope command.")
	})

	t.Run("WithoutEngineSaysSo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noEngine: true})
		b.liveWorkflow(t, "/draft-memo", "Drafts")
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		res, err := b.svc.Message(ctx, ses.ID, "/draft-memo x", user("u"), false)
		require.NoError(t, err)
		require.Contains(t, res.Reply.Payload["text"], "the workflow engine is not running")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
		require.NoError(t, err)
		_, err = b.svc.Message(ctx, ses.ID, "  ", user("u"), false)
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.svc.Message(ctx, "ses_missing", "hi", user("u"), false)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.svc.Command(ctx, ses.ID, "/reboot", user("u"))
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Empty(t, b.events(t, ses.ID))
	})
}

// blockingServer is a model that blocks until its caller cancels: it reports
// each request's arrival and its cancellation.
func blockingServer(t *testing.T) (*chatServer, chan struct{}, chan struct{}) {
	arrived, cancelled := make(chan struct{}, 8), make(chan struct{}, 8)
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
		arrived <- struct{}{}
		<-r.Context().Done()
		cancelled <- struct{}{}
	})
	return cs, arrived, cancelled
}

func TestTerminateCancelsRunningTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, arrived, cancelled := blockingServer(t)
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)

	res, err := b.svc.Message(ctx, ses.ID, "write me an epic", user("u"), true)
	require.NoError(t, err)
	require.NotEmpty(t, res.TurnID)
	<-arrived // the model call is in flight
	got, err := b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, store.SessionRunning, got.Status)
	require.Equal(t, res.TurnID, got.ActiveRunID, "the turn is the session's active run")

	_, err = b.svc.Message(ctx, ses.ID, "and another", user("u"), true)
	require.ErrorIs(t, err, store.ErrConflict, "one turn at a time")

	cmd, err := b.svc.Command(ctx, ses.ID, "/terminate", user("ada"))
	require.NoError(t, err)
	require.True(t, cmd.CancelledTurn)
	require.Equal(t, 1, cmd.CancelledRuns)
	<-cancelled // the model call's context was cancelled
	require.Equal(t, store.SessionCancelled, cmd.Session.Status)
	require.Equal(t, "terminated by user:ada", cmd.Session.DoneReason)
	require.Empty(t, cmd.Session.ActiveRunID)
	_, runs := b.eng.snapshot()
	require.Equal(t, []string{ses.ID + " user:ada"}, runs, "the engine is asked to cancel the session's runs")

	evs := b.events(t, ses.ID)
	require.Equal(t, []string{store.EventUserMessage, store.EventCommand}, types(evs), "no reply from a cancelled turn")
	require.Equal(t, map[string]any{"command": "/terminate", "by": "user:ada"}, evs[1].Payload)
	require.Equal(t, "user:ada", evs[1].Actor)

	// Terminating with nothing running still records the request and asks the engine.
	cmd, err = b.svc.Command(ctx, ses.ID, "/terminate", user("ada"))
	require.NoError(t, err)
	require.False(t, cmd.CancelledTurn)
}

func TestCloseCancelsBackgroundTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, arrived, _ := blockingServer(t)
	b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client()})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	_, err = b.svc.Message(ctx, ses.ID, "long job", user("u"), true)
	require.NoError(t, err)
	<-arrived
	b.svc.Close()
	got, err := b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, store.SessionCancelled, got.Status)
	require.Contains(t, got.DoneReason, "shut down")
}

func TestMessageAfterTurnFinishedIsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	for i := range 20 {
		_, err := b.svc.Message(ctx, ses.ID, "hello", user("u"), true)
		require.NoError(t, err, "message %d: a client that saw the turn finish may send at once", i)
		require.Eventually(t, func() bool {
			got, err := b.svc.GetByID(ctx, ses.ID)
			return err == nil && got.Status == store.SessionDone
		}, 10*time.Second, time.Millisecond)
	}
	require.Len(t, b.events(t, ses.ID), 40)
}

func TestRecoverSettlesTurnsLostInARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Stale after a second: the first Recover comes well before that even
	// on a loaded machine (at 20 ms, a loaded CI run once came after).
	b := setup(t, setupOpts{turnStale: time.Second})
	ses, err := b.svc.Create(ctx, sessions.CreateParams{Source: sessions.Source{UserID: "u"}})
	require.NoError(t, err)
	turn, running := "turn_lost", store.SessionRunning
	_, _, err = b.db.SessionUpdate(ctx, &store.SessionUpdateParams{ID: ses.ID, ActiveRunID: &turn, Status: &running})
	require.NoError(t, err)

	require.NoError(t, b.svc.Recover(ctx))
	got, err := b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, turn, got.ActiveRunID, "a turn whose heartbeat is fresh may be another process's: left alone")
	require.Eventually(t, func() bool {
		if err := b.svc.Recover(ctx); err != nil {
			return false
		}
		got, err := b.svc.GetByID(ctx, ses.ID)
		return err == nil && got.ActiveRunID == ""
	}, 10*time.Second, 20*time.Millisecond, "once its heartbeat is stale it is settled") // waits on the clock: turnStale
	got, err = b.svc.GetByID(ctx, ses.ID)
	require.NoError(t, err)
	require.Equal(t, store.SessionFailed, got.Status)
	require.Contains(t, got.DoneReason, "restarted")
	require.Empty(t, got.ActiveRunID)
	_, err = b.svc.Message(ctx, ses.ID, "still there?", user("u"), false)
	require.NoError(t, err)
}
