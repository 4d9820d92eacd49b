package bridge_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// TestThreadAnswersAreRecorded: what the bot answers in a thread to help,
// workflows, status, policy and a workflow it cannot run is kept in the
// session after the question, as markdown, as a console command's answer
// is; it is posted once, by the bridge, and never again by the mirror.
func TestThreadAnswersAreRecorded(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	tb.addWorkflow(t, "/resting", "paused", "Rests")
	root := tb.ts()
	asks := []struct{ ask, posted, recorded string }{
		{"help", "mention me in a thread", "mention me in a thread"},
		{"workflows", "*Live workflows*", "`draft-memo`"},
		{"status", "*Status:*", "this session in the console"},
		{"policy manual", "now `manual`", "now `manual`"},
		{"nope-such brief", "", ""}, // a chat turn: the template model answers it
		{"run nope-such brief", "There is no workflow `nope-such`", "There is no workflow `nope-such`"},
		{"run", "Usage: `run &lt;command&gt;", "Usage: `run <command> <brief>`"},
		{"resting now", "I can't run `resting`: workflow /resting is paused, not live", "is paused, not live"},
	}
	for i, a := range asks {
		ts := root
		thread := ""
		if i > 0 {
			ts, thread = tb.ts(), root
		}
		tb.event(t, "EvAns"+a.ask, mention("CANS", "U1", ts, thread, a.ask))
		tb.quiet(t)
	}
	posts := tb.posts("CANS", root)
	evs := tb.transcript(t, "CANS", root)
	var answers []transcript.AssistantMessage
	for _, e := range evs {
		if te, err := transcript.Decode(e); err == nil {
			if m, ok := te.(transcript.AssistantMessage); ok {
				answers = append(answers, m)
			}
		}
	}
	require.Len(t, answers, len(asks), "one answer each: %v", answers)
	for i, a := range asks {
		if a.posted == "" {
			continue
		}
		require.Contains(t, answers[i].Text, a.recorded, a.ask)
		n := 0
		for _, p := range posts {
			if strings.Contains(text(p), a.posted) {
				n++
			}
		}
		require.Equal(t, 1, n, "%q answered once in the thread", a.ask)
	}
	for _, p := range posts {
		require.NotContains(t, text(p), "set this thread's policy", "a policy set in the thread is answered, not announced too")
	}
	// Each answer follows its question.
	var order []string
	for _, e := range evs {
		if e.Type == store.EventUserMessage || e.Type == store.EventAssistantMessage {
			order = append(order, e.Type)
		}
	}
	for i := 0; i+1 < len(order); i += 2 {
		require.Equal(t, []string{store.EventUserMessage, store.EventAssistantMessage}, order[i:i+2], "%v", order)
	}
}
