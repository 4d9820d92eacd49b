package bridge_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/store"
)

func TestSocketModeStoresThenAcks(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true})
	api := slack.New("xoxb-test", slack.OptionAppLevelToken("xapp-test"), slack.OptionAPIURL(tb.slack.APIURL()))
	client := socketmode.New(api)
	done := make(chan error, 1)
	go func() { done <- tb.bridge.RunSocketMode(tb.ctx, client) }()
	tb.slack.Connected(t, 10*time.Second)

	ack := func(want string) {
		t.Helper()
		select {
		case got := <-tb.slack.Acks():
			require.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("envelope %s not acknowledged", want)
		}
	}
	root := tb.ts()
	payload := eventBody("EvS1", mention("C9", "U1", root, "", "help"))
	require.NoError(t, tb.slack.SendEnvelope("env-1", "events_api", payload))
	ack("env-1")
	// A message is stored under what it is, not under its event_id.
	added, err := tb.store.SlackInboxAdd(tb.ctx, []*store.SlackInboxAddParams{{Key: "app_mention:C9:" + root, Kind: store.SlackKindEvent, Body: payload}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, added, "stored before it was acknowledged")

	// A redelivery (same event_id, new envelope) is acknowledged, not reprocessed.
	require.NoError(t, tb.slack.SendEnvelope("env-2", "events_api", payload))
	ack("env-2")
	tb.waitPost(t, "C9", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "Holdfast") })

	// A workflow and its hold card, then a click over the socket.
	require.NoError(t, tb.slack.SendEnvelope("env-3", "events_api", eventBody("EvS2", mention("C9", "U1", tb.ts(), root, "draft-memo Sockets"))))
	ack("env-3")
	card, holdID := tb.holdCard(t, "C9", root)
	click, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"},
		"channel": map[string]any{"id": "C9"}, "message": map[string]any{"ts": card.TS, "thread_ts": root},
		"actions": []any{map[string]any{"action_id": "hold_approve", "block_id": "hold:" + holdID, "value": holdID}}})
	require.NoError(t, tb.slack.SendEnvelope("env-4", "interactive", click))
	ack("env-4")
	tb.eventually(t, func() bool { return len(tb.updates("C9", card.TS)) == 1 }, 10*time.Second)
	tb.waitPost(t, "C9", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "Memo dispatched") })
	// help, queued, started, card, approved line, memo lead and memo: nothing twice.
	tb.eventually(t, func() bool { return len(tb.posts("C9", root)) == 7 }, 10*time.Second)
	tb.inboxDrained(t)
	require.Len(t, tb.posts("C9", root), 7)
}

// TestSocketModeModalsAndCommands: over Socket Mode too, "Comment or
// edit…" opens its modal before the ack, a submitted review is stored and
// decided, and /holdfast is answered in the ack's payload.
func TestSocketModeModalsAndCommands(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	api := slack.New("xoxb-test", slack.OptionAppLevelToken("xapp-test"), slack.OptionAPIURL(tb.slack.APIURL()))
	go func() { _ = tb.bridge.RunSocketMode(tb.ctx, socketmode.New(api)) }()
	tb.slack.Connected(t, 10*time.Second)
	ack := func(want string) {
		t.Helper()
		select {
		case got := <-tb.slack.Acks():
			require.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("envelope %s not acknowledged", want)
		}
	}
	root := tb.ts()
	require.NoError(t, tb.slack.SendEnvelope("env-1", "events_api", eventBody("EvSM1", mention("CSM", "U1", root, "", "draft-memo Sockets"))))
	ack("env-1")
	card, holdID := tb.holdCard(t, "CSM", root)

	click, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"}, "trigger_id": "trig-sock",
		"channel": map[string]any{"id": "CSM"}, "message": map[string]any{"ts": card.TS, "thread_ts": root},
		"actions": []any{map[string]any{"action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID}}})
	require.NoError(t, tb.slack.SendEnvelope("env-2", "interactive", click))
	ack("env-2")
	require.Len(t, tb.slack.Views(), 1, "the modal was opened before the ack")
	require.Equal(t, "trig-sock", tb.slack.Views()[0].TriggerID)

	submit, _ := json.Marshal(map[string]any{"type": "view_submission", "user": map[string]any{"id": "USTEWARD"},
		"view": map[string]any{"id": "VSOCK", "type": "modal", "callback_id": "hold_review", "private_metadata": holdID,
			"state": map[string]any{"values": map[string]any{
				"decision": map[string]any{"decision": map[string]any{"type": "radio_buttons", "selected_option": map[string]any{"value": "reject"}}},
				"comment":  map[string]any{"comment": map[string]any{"type": "plain_text_input", "value": "over the socket"}},
			}}}})
	require.NoError(t, tb.slack.SendEnvelope("env-3", "interactive", submit))
	ack("env-3")
	tb.eventually(t, func() bool { return len(tb.updates("CSM", card.TS)) == 1 }, 10*time.Second)
	require.Contains(t, text(tb.updates("CSM", card.TS)[0]), "over the socket")
	h, err := tb.store.HoldGetByID(tb.ctx, holdID)
	require.NoError(t, err)
	require.Equal(t, store.HoldRejected, h.Status)

	cmd, _ := json.Marshal(map[string]string{"command": "/holdfast", "text": "help", "user_id": "U1", "channel_id": "CSM", "trigger_id": "t1"})
	require.NoError(t, tb.slack.SendEnvelope("env-4", "slash_commands", cmd))
	ack("env-4")
	var answer map[string]string
	require.NoError(t, json.Unmarshal(tb.slack.AckPayload("env-4"), &answer))
	require.Equal(t, "ephemeral", answer["response_type"])
	require.Contains(t, answer["text"], "/holdfast &lt;subcommand&gt;")
}
