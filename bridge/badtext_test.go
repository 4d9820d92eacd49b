package bridge_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
)

// TestSlackTextWithNULIsRefused: a Slack text holding a NUL byte is
// refused as the API and console refuse it (SPEC §7: the same on every
// surface): nothing is recorded, queued or started, the sender is told why,
// and the thread goes on working.
func TestSlackTextWithNULIsRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, cfg: stewardsCfg})
	root := tb.ts()
	tb.event(t, "EvN1", mention("CN", "U1", root, "", "status"))
	tb.waitPost(t, "CN", root, func(c fakeslack.Call) bool { return strings.Contains(c.Form["text"], "*Status:*") })
	ses := tb.threadSession(t, "CN", root)
	tb.quiet(t)
	before := tb.eventTypes(t, ses.ID)

	refused := func(user string, inThread ...string) {
		t.Helper()
		tb.waitEphemeral(t, user, func(text string) bool { return strings.Contains(text, "contains a NUL byte") }, inThread...)
	}
	tb.event(t, "EvN2", message("CN", "U1", tb.ts(), root, "said\x00quietly"))
	refused("U1", root)
	tb.event(t, "EvN3", mention("CN", "U2", tb.ts(), root, "draft-memo Ot\x00ters"))
	refused("U2", root)
	tb.event(t, "EvN4", mention("CN", "U3", tb.ts(), "", "draft-memo Eels\x00"))
	refused("U3")

	// Bytes that are not UTF-8 in an event's JSON (which decodes them to
	// U+FFFD) are refused as a NUL is.
	raw := eventBody("EvN6", mention("CN", "U4", tb.ts(), root, "draft-memo Reeds MARK"))
	raw = bytes.Replace(raw, []byte("MARK"), []byte{0xff, 0xfe}, 1)
	status, body := tb.post(t, "/slack/events", "application/json", raw)
	require.Equal(t, http.StatusOK, status, body)
	tb.waitEphemeral(t, "U4", func(text string) bool { return strings.Contains(text, "is not valid UTF-8") }, root)

	status, body = tb.slash(t, "U1", "CN", "run draft-memo Kelp\x00")
	require.Equal(t, http.StatusOK, status)
	var resp map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &resp), body)
	require.Equal(t, "ephemeral", resp["response_type"])
	require.Contains(t, resp["text"], "contains a NUL byte")

	// A modal stays open, the reason under the field, and nothing is stored.
	status, body = tb.interact(t, map[string]any{"type": "view_submission", "user": map[string]any{"id": "U1"},
		"view": map[string]any{"id": "VNUL", "type": "modal", "callback_id": "run_workflow",
			"private_metadata": `{"channel":"CN","threadTs":"` + root + `"}`,
			"state": map[string]any{"values": map[string]any{
				"workflow": map[string]any{"workflow": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": "/draft-memo"}}},
				"brief":    map[string]any{"brief": map[string]any{"type": "plain_text_input", "value": "Herons\x00"}},
			}}}})
	require.Equal(t, http.StatusOK, status)
	var answer struct {
		ResponseAction string            `json:"response_action"`
		Errors         map[string]string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	require.Equal(t, "errors", answer.ResponseAction)
	require.Equal(t, map[string]string{"brief": "This field contains a NUL byte."}, answer.Errors)
	submit := map[string]any{"type": "view_submission", "user": map[string]any{"id": "U1"},
		"view": map[string]any{"id": "VBAD", "type": "modal", "callback_id": "run_workflow",
			"private_metadata": `{"channel":"CN","threadTs":"` + root + `"}`,
			"state": map[string]any{"values": map[string]any{
				"workflow": map[string]any{"workflow": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": "/draft-memo"}}},
				"brief":    map[string]any{"brief": map[string]any{"type": "plain_text_input", "value": "Herons MARK"}},
			}}}}
	payload, err := json.Marshal(submit)
	require.NoError(t, err)
	payload = bytes.Replace(payload, []byte("MARK"), []byte{0xff}, 1)
	status, body = tb.post(t, "/slack/interactions", "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(payload)}}.Encode()))
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	require.Equal(t, map[string]string{"brief": "This field is not valid UTF-8."}, answer.Errors)

	tb.quiet(t)
	require.Equal(t, before, tb.eventTypes(t, ses.ID), "nothing recorded in the thread")
	counts, err := tb.store.QueueItemCountByStatus(tb.ctx)
	require.NoError(t, err)
	for status, n := range counts {
		require.Zero(t, n, "nothing was queued: %s", status)
	}

	tb.event(t, "EvN5", message("CN", "U1", tb.ts(), root, "said plainly"))
	tb.eventually(t, func() bool { return len(tb.eventTypes(t, ses.ID)) == len(before)+1 }, 10e9, "the thread still records")
}
