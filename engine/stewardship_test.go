package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestEditedOutputIsCheckedByTheGuards: an edited output passes the
// workflow's Guard checks before it is accepted, whichever surface sends it;
// a failing check refuses the approval naming the check (409), records the
// attempt and leaves the hold open (SPEC §4.3).
func TestEditedOutputIsCheckedByTheGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/held", "**Approval** `hold`")
	st := b.user(t, "ada", store.RoleSteward, "")
	for _, tc := range []struct {
		name, via, edit string
	}{
		{"Console", "console", "# Kelp\n\nFORBIDDEN words"},
		{"API", "api", "# Kelp\n\nstill FORBIDDEN"},
		{"Slack", "slack", "FORBIDDEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := b.enqueue(t, EnqueueParams{Command: "/held", Payload: map[string]any{"title": "Kelp", "brief": "forests"}})
			h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
			_, err := b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: tc.edit, Decider: via(steward(st), tc.via)})
			require.ErrorIs(t, err, store.ErrConflict)
			require.Contains(t, store.ReasonOf(err), "Guard check not_contains")
			require.Contains(t, store.ReasonOf(err), `"FORBIDDEN"`)
			got, err := b.db.HoldGetByID(ctx, h.ID)
			require.NoError(t, err)
			require.Equal(t, store.HoldOpen, got.Status, "the hold stays open")
			require.Nil(t, got.EditedOutput)
			audit, err := b.db.HoldDecisionList(ctx, h.ID)
			require.NoError(t, err)
			require.Len(t, audit, 1, "the attempt is audited")
			require.Equal(t, store.AttemptRefused, audit[0].Outcome, "audited as a refused attempt (an edge, SPEC §10), answered 409")
			require.Equal(t, tc.edit, *audit[0].Output)
			require.Equal(t, tc.via, audit[0].Via)

			// An edit that passes is accepted and published.
			got, err = b.eng.Decide(ctx, DecideParams{HoldID: h.ID, Decision: "approve", Output: "# Kelp\n\nfine words",
				Decider: via(steward(st), tc.via)})
			require.NoError(t, err)
			require.Equal(t, store.HoldApproved, got.Status)
			r := b.waitRun(t, it.ID, EventRunFinished)
			m, err := b.db.MemoGetByID(ctx, r.DispatchMemoID)
			require.NoError(t, err)
			require.Equal(t, "# Kelp\n\nfine words", m.Body)
		})
	}
}

// TestHoldTitle: a hold says what is being decided (SPEC §4.3): the
// output's first # heading, else payload.title, else the first line of
// payload.brief, else the gate label.
func TestHoldTitle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{})
	b.workflow(t, "/held", "**Approval** `hold`", "**Gate label** Check the draft")
	// /plain writes words of its own, with no heading and nothing from the payload.
	plain := strings.Replace(strings.Replace(wfDoc("/plain", "**Approval** `hold`", "**Gate label** Check the plain one"),
		"# {{.Payload.title}}\n", "", 1), "{{.Payload.brief}}", "Static words", 1)
	_, _, err := b.lib.ImportWorkflow(ctx, "", plain)
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		command string
		payload map[string]any
		want    string
	}{
		{"Heading", "/held", map[string]any{"title": "Otters", "brief": "They hold hands."}, "Otters"},
		{"Brief", "/held", map[string]any{"brief": "Herons at dawn\nand more"}, "Herons at dawn"},
		{"GateLabel", "/plain", map[string]any{}, "Check the plain one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := b.enqueue(t, EnqueueParams{Command: tc.command, Payload: tc.payload})
			h := b.holdOf(t, b.waitRun(t, it.ID, EventHoldOpened))
			require.Equal(t, tc.want, h.Title)
			evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: h.SessionID, Types: []string{EventHoldOpened}})
			require.NoError(t, err)
			require.Len(t, evs, 1)
			require.Equal(t, tc.want, evs[0].Payload["title"], "the transcript line carries it to Slack")
		})
	}
}

// TestHoldReminders: with Remind after, an open hold is reminded after each
// interval, at most three times, naming the Slack stewards who may still
// approve it; a decision stops them, and a second engine on the same store
// (a restart) neither repeats nor loses one.
func TestHoldReminders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{noStart: true, cfg: Config{SlackStewards: []string{"UREQ", "USTEW"}}})
	b.workflow(t, "/held", "**Approval** `hold`", "**Remind after** `1h`")
	b.user(t, "ada", store.RoleSteward, "UADA")
	b.user(t, "vic", store.RoleViewer, "UVIC")
	it := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "slack:UREQ", Payload: map[string]any{"title": "Otters", "brief": "x"}})
	other := b.enqueue(t, EnqueueParams{Command: "/held", OwnerUID: "slack:UREQ", Payload: map[string]any{"title": "Herons", "brief": "y"}})
	_, err := b.eng.RunPass(ctx)
	require.NoError(t, err)
	h, err := b.db.HoldGetByID(ctx, store.HoldIDForRun(store.RunIDForItem(it.ID)))
	require.NoError(t, err)
	decided, err := b.db.HoldGetByID(ctx, store.HoldIDForRun(store.RunIDForItem(other.ID)))
	require.NoError(t, err)
	require.Equal(t, time.Hour, h.RemindEvery)
	_, err = b.eng.Decide(ctx, DecideParams{HoldID: decided.ID, Decision: "reject", Decider: Decider{SlackUserID: "USTEW", Via: "slack"}})
	require.NoError(t, err)

	reminders := func(sessionID string) []*store.Event {
		evs, err := b.db.EventList(ctx, &store.EventListParams{SessionID: sessionID, Types: []string{EventHoldReminder}})
		require.NoError(t, err)
		return evs
	}
	pass := func(e *Engine) {
		_, err := e.RunPass(ctx)
		require.NoError(t, err)
	}
	pass(b.eng)
	require.Empty(t, reminders(h.SessionID), "not due before the interval")

	b.clock.Advance(61 * time.Minute)
	pass(b.eng)
	pass(b.eng)
	evs := reminders(h.SessionID)
	require.Len(t, evs, 1, "one reminder per interval, however many passes run")
	require.Equal(t, []any{"UADA", "USTEW"}, evs[0].Payload["stewards"], "stewards who may approve: not the requester, not a viewer")
	require.EqualValues(t, 1, evs[0].Payload["n"])
	require.Equal(t, "Otters", evs[0].Payload["title"])
	require.Empty(t, reminders(decided.SessionID), "a decided hold is not reminded")

	// A restart: the next process sends the next reminder, once.
	next := New(Config{SlackStewards: []string{"UREQ", "USTEW"}, Now: b.clock.Now, DisableScheduler: true}, b.db, b.eng.models, nil)
	pass(next)
	require.Len(t, reminders(h.SessionID), 1, "the restart repeats nothing")
	for i := 2; i <= 4; i++ {
		b.clock.Advance(61 * time.Minute)
		pass(next)
		pass(b.eng)
	}
	evs = reminders(h.SessionID)
	require.Len(t, evs, MaxReminders, "at most three")
	require.EqualValues(t, 3, evs[2].Payload["n"])
	got, err := b.db.HoldGetByID(ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, 3, got.RemindersSent)
	require.Nil(t, got.RemindAt)
	require.Equal(t, store.HoldOpen, got.Status, "reminding decides nothing")
}

// TestHoldTitleKept: a hold's kept title answers for it (its output or
// payload may say otherwise by then), unless an edited output brings a
// heading of its own — one rule for every surface.
func TestHoldTitleKept(t *testing.T) {
	t.Parallel()
	edited, plain := "# From the edit\n\ntext", "no heading here"
	for _, tc := range []struct {
		name string
		hold *store.Hold
		want string
	}{
		{"Kept", &store.Hold{Title: "Otters", Output: "# Something else", GateLabel: "Review"}, "Otters"},
		{"EditWithHeading", &store.Hold{Title: "Otters", Output: "# Otters", EditedOutput: &edited}, "From the edit"},
		{"EditWithoutHeading", &store.Hold{Title: "Otters", Output: "# Otters", EditedOutput: &plain}, "Otters"},
		{"NoneKept", &store.Hold{Output: "# Derived", GateLabel: "Review"}, "Derived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, HoldTitle(tc.hold, map[string]any{"title": "payload"}))
		})
	}
}
