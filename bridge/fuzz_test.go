package bridge_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/holdfast-bot/holdfast/bridge"
)

// FuzzParseEvent feeds arbitrary bodies through the Events API parsing the
// handler and the inbox worker do: never a panic, and what is accepted is
// well formed.
func FuzzParseEvent(f *testing.F) {
	f.Add(eventBody("Ev1", mention("C1", "U1", "1.000001", "", "draft-memo Otters")))
	f.Add(eventBody("Ev2", message("C1", "U1", "1.000002", "1.000001", "hello <@UBOT|bot> &amp; you")))
	f.Add([]byte(`{"type":"url_verification","challenge":"x"}`))
	f.Add([]byte(`{"type":"event_callback","event_id":"E","event":{"type":"message","text":null}}`))
	f.Add([]byte(`{"type":"event_callback","event_id":"E","event":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := bridge.ParseEnvelope(body)
		if err != nil {
			return
		}
		if env.Type == "event_callback" && env.EventID == "" {
			t.Fatal("accepted an event without an event_id")
		}
		if env.Type != "event_callback" {
			return
		}
		if env.EventErr != nil {
			return
		}
		m := env.Event
		_ = m.Root()
		cmd := bridge.ParseCommand(m.Text)
		if strings.IndexFunc(cmd.Name, unicode.IsSpace) >= 0 {
			t.Fatalf("command name %q holds whitespace", cmd.Name)
		}
		if cmd.Arg != strings.TrimSpace(cmd.Arg) {
			t.Fatalf("argument %q is not trimmed", cmd.Arg)
		}
	})
}

// FuzzParseInteraction does the same for interactivity payloads.
func FuzzParseInteraction(f *testing.F) {
	f.Add([]byte(`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"1.1","thread_ts":"1.0"},"actions":[{"action_id":"hold_approve","value":"hld_1"}]}`))
	f.Add([]byte(`{"type":"block_actions","user":{"id":""}}`))
	f.Add([]byte(`{"type":"view_submission","user":{"id":"U1"},"actions":{}}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		in, err := bridge.ParseInteraction(payload)
		if err != nil {
			return
		}
		if in.Type == "" || in.Type == "block_actions" && in.User.ID == "" {
			t.Fatalf("accepted %+v", in)
		}
		_, _ = in.ChannelID(), in.ThreadTS()
	})
}
