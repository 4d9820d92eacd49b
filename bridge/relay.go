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
	who, ok := b.outsider(ctx, ev.Actor)
	if !ok {
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

// outsider names, as a thread shows them, someone who acted on a thread's
// session from outside Slack: "*ada* (console)", "*API key “ci”* (api)".
// ok is false for Slack's own users and the system, whose doings the
// thread shows already.
func (b *Bridge) outsider(ctx context.Context, actor string) (who string, ok bool) {
	switch kind, id, _ := strings.Cut(actor, ":"); kind {
	case "user":
		return b.requester(ctx, actor), true
	case "key":
		return "*" + esc(b.keyName(ctx, id)) + "* (api)", true
	}
	return "", false
}

// policyNotice tells a thread that someone outside Slack changed how much
// of its output is held: it changes what the next run in the thread does.
// A change made in the thread is answered there by the policy command.
func (b *Bridge) policyNotice(ctx context.Context, key, channel, thread string, ev *store.SlackMirrorEvent, p transcript.PolicySet) []*store.SlackOutboxAddParams {
	who, ok := b.outsider(ctx, ev.Actor)
	if !ok {
		return nil
	}
	return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
		Channel: channel, ThreadTS: postTS(thread),
		Text: fmt.Sprintf(":gear: %s set this thread's policy to `%s`: %s.", who, esc(p.Policy), policyMeaning[p.Policy])}}
}

// policyMeaning says what each policy holds for review.
var policyMeaning = map[string]string{
	store.PolicyManual: "every output is held for review",
	store.PolicyAuto:   "each workflow's own policy decides what is held",
	store.PolicyYolo:   "nothing is held for review",
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
