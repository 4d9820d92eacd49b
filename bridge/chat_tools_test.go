package bridge_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/bridge/internal/fakeslack"
	"github.com/holdfast-bot/holdfast/engine/fakellm"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// TestChatTurnSearchesTheLibraryInAThread: with an OpenAI-compatible model
// (the fake server, scripted to call search_memos and then read_memo), a
// question in a Slack thread is answered there; the second request carries
// the search's result, the third the memo, and the transcript records
// both tool calls.
func TestChatTurnSearchesTheLibraryInAThread(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{real: true, noStart: true})
	people(tb)
	m, err := tb.store.MemoCreate(tb.ctx, &store.MemoCreateParams{Title: "Otter census brief", Body: "Count the otters at dawn, from the north bank.",
		Tags: []string{"brief"}})
	require.NoError(t, err)

	llm := fakellm.New(false)
	t.Cleanup(llm.Close)
	call := func(id, name string, args map[string]any) map[string]any {
		b, _ := json.Marshal(args)
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": name, "arguments": string(b)}}}}
	}
	llm.Script(func(n int, body map[string]any) map[string]any {
		switch n {
		case 1:
			return call("call_s", "search_memos", map[string]any{"query": "otters tag:brief since:7d"})
		case 2:
			return call("call_r", "read_memo", map[string]any{"id": m.ID})
		}
		return map[string]any{"role": "assistant", "content": "Count them at dawn, from the north bank."}
	})
	models := model.NewRegistry("openai:gpt-test", model.Config{OpenAIBaseURL: llm.URL, OpenAIAPIKey: "sk-test", HTTPClient: llm.Client()})
	ses := sessions.New(tb.store, sessions.Config{DefaultPolicy: "auto", Models: models, DefaultModel: "openai:gpt-test"}, tb.eng, discard())
	t.Cleanup(ses.Close)
	runBridge(t, tb, bridge.New(bridge.Config{SigningSecret: secret, Tick: 200 * time.Millisecond}, tb.store, apiFor(tb), tb.engine, ses, discard()))

	root := tb.ts()
	tb.event(t, "EvC1", mention("CC", "U1", root, "", "how do we count the otters?"))
	reply := tb.waitPost(t, "CC", root, func(c fakeslack.Call) bool { return strings.Contains(text(c), "north bank") })
	require.Contains(t, text(reply), "Count them at dawn", "the reply lands in the thread")

	reqs := llm.Requests()
	require.Len(t, reqs, 3)
	last := func(i int) map[string]any {
		msgs := reqs[i]["messages"].([]any)
		return msgs[len(msgs)-1].(map[string]any)
	}
	require.Equal(t, "Ada: how do we count the otters?", last(0)["content"], "the model sees who asked")
	require.Equal(t, "tool", last(1)["role"])
	require.Equal(t, "call_s", last(1)["tool_call_id"])
	require.Contains(t, last(1)["content"], m.ID, "the second request carries the search's result")
	require.Equal(t, "call_r", last(2)["tool_call_id"])
	require.Contains(t, last(2)["content"], "from the north bank", "the third carries the memo")

	var tools []string
	for _, e := range tb.transcript(t, "CC", root) {
		if e.Type == store.EventToolResult {
			tools = append(tools, e.Payload["tool_id"].(string))
		}
	}
	require.Equal(t, []string{"search_memos", "read_memo"}, tools, "the transcript shows both tool calls")
}
