package bridge_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/cmd/bot/bottest"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// signedPost sends body to a running bot as Slack would, signed.
func signedPost(t *testing.T, base, path, contentType string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	require.NoError(t, err)
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Slack-Signature", sign(ts, body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func signedInteraction(t *testing.T, base string, payload map[string]any) int {
	t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	return signedPost(t, base, "/slack/interactions", "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(b)}}.Encode()))
}

// TestStewardshipThroughTheBinary is the loop end to end with the
// real `bot serve` against the fake Slack: a mention queues a workflow, its
// hold card comes, a steward's "Comment or edit…" opens the review modal,
// the steward approves an edited output, the memo posted in the thread is
// the edited text, the requester is mentioned, and the card shows the
// decision.
func TestStewardshipThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	t.Parallel()
	bin := bottest.Binary(t)

	fake := fakeslack.New(t)
	fake.AddUser(fakeslack.User{ID: "U1", Name: "ada", DisplayName: "Ada"})
	env := append(os.Environ(), "HOLDFAST_DB="+testdb.New(t).DSN(), "HOLDFAST_ADMIN_PASSWORD=e2e-pw",
		"HOLDFAST_BASE_URL=http://holdfast.test", "SLACK_BOT_TOKEN=xoxb-test", "SLACK_SIGNING_SECRET="+secret,
		"SLACK_API_URL="+fake.APIURL(), "SLACK_STEWARDS=USTEWARD", "SLACK_APP_TOKEN=") // HTTP mode
	p := bottest.Start(t, bin, env)
	t.Cleanup(func() {
		if t.Failed() {
			log := p.Log()
			t.Logf("serve's log:\n%s", log[max(0, len(log)-8000):])
		}
	})

	// The mention and its hold card.
	const root = "1700000500.000100"
	status := signedPost(t, p.URL, "/slack/events", "application/json",
		eventBody("EvBin1", mention("C1", "U1", root, "", "draft-memo Otters\nOtters hold hands while they sleep.")))
	require.Equal(t, http.StatusOK, status)
	inThread := func(match func(m fakeslack.Message) bool) *fakeslack.Message {
		for _, m := range fake.Messages("C1") {
			if m.ThreadTS == root && m.BotID == fakeslack.BotID && match(m) {
				return &m
			}
		}
		return nil
	}
	var card *fakeslack.Message
	require.Eventually(t, func() bool {
		card = inThread(func(m fakeslack.Message) bool { return strings.Contains(string(m.Blocks), `"hold_review"`) })
		return card != nil
	}, 30*time.Second, 10*time.Millisecond, "the hold card")
	holdID := regexp.MustCompile(`"block_id":"hold:([^"]+)"`).FindStringSubmatch(string(card.Blocks))[1]
	require.Contains(t, unescapeJSON(string(card.Blocks)), "*Otters*")
	require.Contains(t, unescapeJSON(string(card.Blocks)), "asked by <@U1>")

	// The review modal opens on the click, before its ack.
	status = signedInteraction(t, p.URL, map[string]any{"type": "block_actions", "user": map[string]any{"id": "USTEWARD"},
		"trigger_id": "trig-bin", "channel": map[string]any{"id": "C1"},
		"container": map[string]any{"type": "message", "channel_id": "C1", "message_ts": card.TS, "thread_ts": root},
		"message":   map[string]any{"ts": card.TS, "thread_ts": root},
		"actions":   []any{map[string]any{"action_id": "hold_review", "block_id": "hold:" + holdID, "value": holdID, "action_ts": "1"}}})
	require.Equal(t, http.StatusOK, status)
	require.Len(t, fake.Views(), 1)
	view := viewOf(t, fake.Views()[0])
	require.Equal(t, []any{"hold_review", holdID}, []any{view["callback_id"], view["private_metadata"]})
	original := blockByID(view, "output")["element"].(map[string]any)["initial_value"].(string)
	require.Contains(t, original, "Otters hold hands while they sleep.")

	// The steward approves an edited output.
	edited := "# Otters\n\nOtters hold hands, and a steward said so."
	status = signedInteraction(t, p.URL, map[string]any{"type": "view_submission", "user": map[string]any{"id": "USTEWARD"},
		"view": map[string]any{"id": "VBIN", "type": "modal", "callback_id": "hold_review", "private_metadata": holdID,
			"state": map[string]any{"values": map[string]any{
				"decision": map[string]any{"decision": map[string]any{"type": "radio_buttons", "selected_option": map[string]any{"value": "approve"}}},
				"comment":  map[string]any{"comment": map[string]any{"type": "plain_text_input", "value": "clearer now"}},
				"output":   map[string]any{"output": map[string]any{"type": "plain_text_input", "value": edited}},
			}}}})
	require.Equal(t, http.StatusOK, status)

	require.Eventually(t, func() bool {
		return inThread(func(m fakeslack.Message) bool {
			return len(m.Blocks) > 0 && strings.Contains(string(m.Blocks), "a steward said so") && !strings.Contains(string(m.Blocks), "hold:")
		}) != nil
	}, 30*time.Second, 10*time.Millisecond, "the memo, with the edited text, in the thread")
	require.Nil(t, inThread(func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), "while they sleep") && !strings.Contains(string(m.Blocks), "hold:")
	}), "the run's own output was not published")
	var told *fakeslack.Message
	require.Eventually(t, func() bool {
		told = inThread(func(m fakeslack.Message) bool { return strings.HasPrefix(m.Text, "<@U1>") })
		return told != nil
	}, 30*time.Second, 10*time.Millisecond, "the requester is mentioned")
	require.Contains(t, told.Text, "*Approved* by <@USTEWARD> via slack")
	require.Contains(t, told.Text, "clearer now")
	require.Eventually(t, func() bool {
		for _, m := range fake.Messages("C1") {
			if m.TS == card.TS {
				b := unescapeJSON(string(m.Blocks))
				return !strings.Contains(b, "hold_approve") && strings.Contains(b, "*Approved* by <@USTEWARD> via slack") &&
					strings.Contains(b, "a steward said so") && strings.Contains(b, "clearer now")
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the card shows the decision and the published text")
	// The submitter's answer is queued after Decide returns, so it may be
	// sent after the mirror's posts for the decision: wait for it too.
	var eph []fakeslack.Call
	waitSlack(t, fake, func() bool { eph = fake.Delivered("chat.postEphemeral"); return len(eph) > 0 }, 30*time.Second,
		"the submitter is answered")
	require.Contains(t, eph[len(eph)-1].Form["text"], "You approved *Otters* with your edit")

	p.Stop(t)
}
