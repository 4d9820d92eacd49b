package bridge

import (
	"context"
	"fmt"
	"strings"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// relayChars bounds a console message posted into a thread; a longer one
// is cut and links the session.
const relayChars = 3000

// consoleMessage posts a message someone typed outside Slack (the console,
// or the API as a console user or a key) into the Slack thread of the
// session, attributed: "*ada* (console): …" (SPEC §5). Messages that came
// from Slack are in the thread already.
func (b *Bridge) consoleMessage(ctx context.Context, key, channel, thread string, ev *store.SlackMirrorEvent, m transcript.UserMessage) []*store.SlackOutboxAddParams {
	kind, id, _ := strings.Cut(ev.Actor, ":")
	var who string
	switch kind {
	case "user":
		who = "a console user"
		if u, err := b.store.UserGetByID(ctx, id); err == nil {
			who = u.Username
		}
		who = "*" + esc(who) + "* (console)"
	case "key":
		who = "*" + esc(b.keyName(ctx, id)) + "* (api)"
	default:
		return nil // Slack's own messages, and nobody's
	}
	text := strings.TrimSpace(m.Text)
	if text == "" {
		return nil
	}
	if r := []rune(text); len(r) > relayChars {
		text = string(r[:relayChars-1]) + "…"
		text = esc(text) + fmt.Sprintf(" (<%s/sessions/%s|the rest in the console>)", b.cfg.BaseURL, ev.SessionID)
	} else {
		text = esc(text)
	}
	return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
		Channel: channel, ThreadTS: postTS(thread), Text: who + ": " + text}}
}

// keyName names an API key as its owner named it (API key “ci bot”), as
// the console does; its id says nothing to people in a thread.
func (b *Bridge) keyName(ctx context.Context, id string) string {
	keys, err := b.store.APIKeyList(ctx)
	if err == nil {
		for _, k := range keys {
			if k.ID == id && k.Name != "" {
				return "API key “" + k.Name + "”"
			}
		}
	}
	return "an API client"
}
