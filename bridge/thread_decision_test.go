package bridge_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// listedHold is one line of a thread's list of open holds: `<short id>` — *<title>*.
var listedHold = regexp.MustCompile("(?m)^• `([^`]+)` — \\*([^*]+)\\*")

// listedHolds reads a list of open holds as a steward sees it: each hold's
// short id by its title.
func listedHolds(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range listedHold.FindAllStringSubmatch(text, -1) {
		out[m[2]] = m[1]
	}
	return out
}

// twoHolds opens two holds of one workflow in a new thread, titled First
// and Second, and answers the thread's root and the holds by title.
func twoHolds(t *testing.T, tb *testBundle, channel string) (string, map[string]*store.Hold) {
	t.Helper()
	root := tb.ts()
	tb.event(t, "EvH1", mention(channel, "U1", root, "", "draft-memo First"))
	tb.holdCard(t, channel, root)
	tb.event(t, "EvH2", mention(channel, "U1", tb.ts(), root, "draft-memo Second"))
	byTitle := map[string]*store.Hold{}
	tb.eventually(t, func() bool {
		holds, err := tb.store.HoldList(tb.ctx, &store.HoldListParams{Status: store.HoldOpen, SessionID: tb.threadSession(t, channel, root).ID, Limit: 10})
		if err != nil || len(holds) != 2 {
			return false
		}
		for _, h := range holds {
			byTitle[h.Title] = h
		}
		return true
	}, 10*time.Second)
	require.Contains(t, byTitle, "First")
	require.Contains(t, byTitle, "Second")
	return root, byTitle
}

// TestSlackThreadDecisionByShortID: in a thread with several open holds of
// one workflow, a bare `@bot approve` decides nothing and lists each hold's
// short id and title (SPEC §4.3); `approve <short id> [comment]` (or the
// full id, in any case) decides that hold alone; a short id that names no
// open hold of the thread, or one already decided, decides nothing and
// says so.
func TestSlackThreadDecisionByShortID(t *testing.T) {
	t.Parallel()
	type want struct {
		status, comment string // "" status: open
	}
	cases := []struct {
		name string
		// ask is the steward's mentions after the bare `approve`, made of
		// the listed short ids and the holds.
		ask func(short map[string]string, holds map[string]*store.Hold) []string
		// first and second are each hold's state after the last mention.
		first, second want
		// says is in the steward's answer to the last mention, never not.
		says, never []string
	}{
		{name: "ListOnly", ask: func(map[string]string, map[string]*store.Hold) []string { return nil }},
		{name: "ShortID", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			return []string{"approve " + s["First"] + " the first one"}
		}, first: want{store.HoldApproved, "the first one"}},
		{name: "ShortIDAnyCaseReject", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			return []string{"reject " + strings.ToUpper(s["Second"]) + " not now"}
		}, second: want{store.HoldRejected, "not now"}},
		{name: "ShortIDInBackticks", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			return []string{"approve `" + s["Second"] + "`"}
		}, second: want{store.HoldApproved, ""}},
		{name: "FullID", ask: func(_ map[string]string, h map[string]*store.Hold) []string {
			return []string{"approve " + h["Second"].ID + " ok"}
		}, second: want{store.HoldApproved, "ok"}},
		{name: "UnknownShortID", ask: func(map[string]string, map[string]*store.Hold) []string {
			return []string{"approve zzzzzz ship it"}
		}, says: []string{"`zzzzzz`", "decided nothing", "First", "Second"}},
		{name: "PrefixOfAnID", ask: func(_ map[string]string, h map[string]*store.Hold) []string {
			return []string{"approve " + h["First"].ID[:8] + " ship it"}
		}, says: []string{"decided nothing"}},
		{name: "AlreadyDecidedShortID", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			// The second time, Second is the thread's only open hold:
			// First's short id must not be taken for a comment on it.
			return []string{"approve " + s["First"] + " yes", "approve " + s["First"] + " again"}
		}, first: want{store.HoldApproved, "yes"}, says: []string{"Nothing was changed", "already"}},
		{name: "AlreadyDecidedFullID", ask: func(_ map[string]string, h map[string]*store.Hold) []string {
			return []string{"approve " + h["First"].ID + " yes", "approve " + h["First"].ID + " again"}
		}, first: want{store.HoldApproved, "yes"}, says: []string{"Nothing was changed", "already"}},
		{name: "OneOpenHoldMistypedShortID", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			// With one open hold left, a word shaped as a short id, with
			// a digit no comment's first word has, is a mistyped one.
			return []string{"approve " + s["First"], "approve 0a1b2c looks fine"}
		}, first: want{store.HoldApproved, ""}, says: []string{"`0a1b2c`", "decided nothing", "Second"}},
		{name: "SeveralOpenHoldsComment", ask: func(map[string]string, map[string]*store.Hold) []string {
			// A comment's first word is no hold's name, and not said to be.
			return []string{"approve looks fine"}
		}, says: []string{"2 open holds", "rather than guess", "First", "Second"}, never: []string{"`looks`"}},
		{name: "OneOpenHoldComment", ask: func(s map[string]string, _ map[string]*store.Hold) []string {
			// With one open hold left, words that name no hold are the comment.
			return []string{"approve " + s["First"], "approve looks fine"}
		}, first: want{store.HoldApproved, ""}, second: want{store.HoldApproved, "looks fine"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
			channel := "CS" + string(rune('A'+i))
			root, holds := twoHolds(t, tb, channel)
			answers := func() []string {
				var out []string
				for _, c := range tb.slack.Delivered("chat.postEphemeral") {
					if c.Form["channel"] == channel && c.Form["user"] == "USTEWARD" {
						out = append(out, c.Form["text"])
					}
				}
				return out
			}

			tb.event(t, "EvS0", mention(channel, "USTEWARD", tb.ts(), root, "approve"))
			tb.eventually(t, func() bool { return len(answers()) == 1 }, 10*time.Second)
			list := answers()[0]
			t.Logf("listed: %s", list)
			require.Contains(t, list, "2 open holds")
			requireWordsNotIDs(t, list)
			requireSlackEscaped(t, list)
			short := listedHolds(t, list)
			require.Len(t, short, 2, "each hold's short id and title: %s", list)
			require.NotEqual(t, short["First"], short["Second"])
			for title, id := range short {
				require.Less(t, len(id), len(holds[title].ID), "a short id is shorter than the id")
			}
			tb.quiet(t)
			for _, h := range holds {
				got, err := tb.store.HoldGetByID(tb.ctx, h.ID)
				require.NoError(t, err)
				require.Equal(t, store.HoldOpen, got.Status, "nothing decided on a guess")
			}

			asks := tc.ask(short, holds)
			for j, ask := range asks {
				tb.event(t, "EvS"+string(rune('1'+j)), mention(channel, "USTEWARD", tb.ts(), root, ask))
				tb.quiet(t)
			}
			for title, w := range map[string]want{"First": tc.first, "Second": tc.second} {
				got, err := tb.store.HoldGetByID(tb.ctx, holds[title].ID)
				require.NoError(t, err)
				require.Equal(t, []string{orOpen(w.status), w.comment}, []string{got.Status, got.Comment}, "hold %s", title)
			}
			if len(tc.says) > 0 {
				all := answers()
				last := all[len(all)-1]
				t.Logf("answered: %s", last)
				for _, s := range tc.says {
					require.Contains(t, last, s)
				}
				for _, s := range tc.never {
					require.NotContains(t, last, s)
				}
			}
		})
	}
}

// TestSlackThreadDecisionByNonSteward: someone who may not decide holds
// is told so, not handed a list of holds to choose among, and nothing is
// decided; an attempt on the thread's one open hold is refused by the
// engine, and audited, as a click on its card is.
func TestSlackThreadDecisionByNonSteward(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root, holds := twoHolds(t, tb, "CNS")
	for i, ask := range []string{"approve", "approve looks fine", "reject zzzzzz no"} {
		tb.event(t, fmt.Sprintf("EvNS%d", i), mention("CNS", "U2", tb.ts(), root, ask))
		tb.eventually(t, func() bool { return len(tb.ephemerals("U2")) == i+1 }, 10*time.Second, "answered: %s", ask)
		answer := tb.ephemerals("U2")[i].Form["text"]
		require.Contains(t, answer, "only stewards may approve or reject holds", ask)
		require.Contains(t, answer, "<@USTEWARD>", "names who may")
		require.NotContains(t, answer, "First", "no list of holds")
	}
	tb.quiet(t)
	require.Len(t, tb.ephemerals("U2"), 3, "one answer each")
	for _, h := range holds {
		got, err := tb.store.HoldGetByID(tb.ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, store.HoldOpen, got.Status)
		audit, err := tb.store.HoldDecisionList(tb.ctx, h.ID)
		require.NoError(t, err)
		require.Empty(t, audit, "no hold was named: no attempt on one")
	}

	tb.event(t, "EvNS3", mention("CNS", "USTEWARD", tb.ts(), root, "approve "+engine.ShortHoldID(holds["First"].ID)))
	tb.quiet(t)
	tb.event(t, "EvNS4", mention("CNS", "U2", tb.ts(), root, "approve me please"))
	tb.eventually(t, func() bool { return len(tb.ephemerals("U2")) == 4 }, 10*time.Second)
	require.Contains(t, tb.ephemerals("U2")[3].Form["text"], "You can't approve this hold")
	audit, err := tb.store.HoldDecisionList(tb.ctx, holds["Second"].ID)
	require.NoError(t, err)
	require.Len(t, audit, 1, "the refused attempt is audited")
	require.Equal(t, store.AttemptRefused, audit[0].Outcome)
}

func orOpen(status string) string {
	if status == "" {
		return store.HoldOpen
	}
	return status
}

// TestSlackThreadDecisionSharedShortID: two open holds of a thread whose
// short ids are alike are listed by full id; the short id decides neither
// and says so, and the full id decides the one it names.
func TestSlackThreadDecisionSharedShortID(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	eng := tb.engine.(*recordingEngine)
	eng.stewards["USTEWARD"] = true
	// Two hold ids of one short id (30 bits: found within some 10^5 tries).
	seen := map[string]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		id := fmt.Sprintf("hld_twin%d", i)
		if other, ok := seen[engine.ShortHoldID(id)]; ok {
			a, b = other, id
		}
		seen[engine.ShortHoldID(id)] = id
	}
	short := engine.ShortHoldID(a)
	root := tb.ts()
	tb.event(t, "EvT0", mention("CT", "U1", root, "", "hello"))
	tb.inboxDrained(t)
	ses := tb.threadSession(t, "CT", root)
	tb.addWorkflow(t, "/held", "live", "held")
	tb.openHoldAs(t, ses.ID, a, "Otters")
	tb.openHoldAs(t, ses.ID, b, "Kelp")
	answers := func() []string {
		var out []string
		for _, c := range tb.slack.Delivered("chat.postEphemeral") {
			out = append(out, c.Form["text"])
		}
		return out
	}

	tb.event(t, "EvT1", mention("CT", "USTEWARD", tb.ts(), root, "approve"))
	tb.eventually(t, func() bool { return len(answers()) == 1 }, 10*time.Second)
	require.Equal(t, map[string]string{"Otters": a, "Kelp": b}, listedHolds(t, answers()[0]), "listed by full id")

	tb.event(t, "EvT2", mention("CT", "USTEWARD", tb.ts(), root, "approve "+short+" ship it"))
	tb.eventually(t, func() bool { return len(answers()) == 2 }, 10*time.Second)
	require.Contains(t, answers()[1], "`"+short+"` names 2 open holds")
	require.Contains(t, answers()[1], "decided nothing")
	require.Equal(t, map[string]string{"Otters": a, "Kelp": b}, listedHolds(t, answers()[1]))
	tb.quiet(t)
	_, decides := eng.snapshot()
	require.Empty(t, decides, "nothing decided")

	tb.event(t, "EvT3", mention("CT", "USTEWARD", tb.ts(), root, "approve "+b+" ship it"))
	tb.eventually(t, func() bool { _, d := eng.snapshot(); return len(d) == 1 }, 10*time.Second)
	_, decides = eng.snapshot()
	require.Equal(t, engine.DecideParams{HoldID: b, Decision: "approve", Comment: "ship it",
		Decider: engine.Decider{SlackUserID: "USTEWARD", Via: "slack"}}, decides[0])
}

// openHoldAs stores a suspended run in session sessionID held at an open
// hold of id holdID and title, as the engine would leave it (the workflow
// /held added first).
func (tb *testBundle) openHoldAs(t *testing.T, sessionID, holdID, title string) {
	t.Helper()
	wf, err := tb.store.WorkflowGetByCommand(tb.ctx, "/held")
	require.NoError(t, err)
	it, _, err := tb.store.QueueItemInsert(tb.ctx, &store.QueueItemInsertParams{ID: store.NewID("itm"), WorkflowMemoID: wf.MemoID,
		Command: "/held", DedupeKey: holdID, SessionID: sessionID})
	require.NoError(t, err)
	runs, err := tb.store.QueueItemClaim(tb.ctx, &store.QueueItemClaimParams{RunnerID: "test", Claims: []store.ItemClaim{{ItemID: it.ID}}})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	_, err = tb.store.RunSuspend(tb.ctx, &store.RunSuspendParams{RunCheckpointParams: store.RunCheckpointParams{RunID: runs[0].ID, Lease: runs[0].Lease},
		Hold: &store.Hold{ID: holdID, SessionID: sessionID, Command: "/held", Title: title, Output: "out", RequiredApprovals: 1}})
	require.NoError(t, err)
}

// TestSlackThreadDecisionOtherThreadsShortID: a short id copied from
// another thread's list names no hold of this thread, so even where this
// thread has a single open hold it is not taken for the first word of a
// comment on that one: nothing is decided in either thread.
func TestSlackThreadDecisionOtherThreadsShortID(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	eng := tb.engine.(*recordingEngine)
	eng.stewards["USTEWARD"] = true
	tb.addWorkflow(t, "/held", "live", "held")
	rootA, rootB := tb.ts(), tb.ts()
	tb.event(t, "EvO0", mention("CO", "U1", rootA, "", "hello"))
	tb.event(t, "EvO1", mention("CO", "U1", rootB, "", "hello"))
	tb.inboxDrained(t)
	tb.openHoldAs(t, tb.threadSession(t, "CO", rootA).ID, "hld_otherthread", "Otters")
	tb.openHoldAs(t, tb.threadSession(t, "CO", rootB).ID, "hld_thisthread", "Kelp")

	short := engine.ShortHoldID("hld_otherthread")
	tb.event(t, "EvO2", mention("CO", "USTEWARD", tb.ts(), rootB, "approve "+short+" ship it"))
	tb.eventually(t, func() bool { return len(tb.slack.Delivered("chat.postEphemeral")) == 1 }, 10*time.Second)
	answer := tb.slack.Delivered("chat.postEphemeral")[0].Form["text"]
	require.Contains(t, answer, "`"+short+"`")
	require.Contains(t, answer, "decided nothing")
	tb.quiet(t)
	_, decides := eng.snapshot()
	require.Empty(t, decides, "neither thread's hold is decided")
}

// TestSlackThreadDecisionPunctuated: a steward writes a decision as people
// write, with a colon, a comma or an exclamation after the verb; it decides
// the thread's hold, the rest is the comment.
func TestSlackThreadDecisionPunctuated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, decision, comment string }{
		{"reject: needs sources", "reject", "needs sources"},
		{"approve, looks good", "approve", "looks good"},
		{"Approve!", "approve", ""},
		{"REJECT. off topic", "reject", "off topic"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, standIns())
			eng := tb.engine.(*recordingEngine)
			eng.stewards["USTEWARD"] = true
			tb.addWorkflow(t, "/held", "live", "held")
			root := tb.ts()
			tb.event(t, "EvP0", mention("CP", "U1", root, "", "hello"))
			tb.inboxDrained(t)
			tb.openHoldAs(t, tb.threadSession(t, "CP", root).ID, "hld_punct", "Otters")
			tb.event(t, "EvP1", mention("CP", "USTEWARD", tb.ts(), root, tc.text))
			tb.eventually(t, func() bool { _, d := eng.snapshot(); return len(d) == 1 }, 10*time.Second, "the hold is decided")
			_, decides := eng.snapshot()
			require.Equal(t, "hld_punct", decides[0].HoldID)
			require.Equal(t, tc.decision, decides[0].Decision)
			require.Equal(t, tc.comment, decides[0].Comment)
		})
	}
}
