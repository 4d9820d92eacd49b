package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/slack-go/slack/socketmode"

	"github.com/holdfast-bot/holdfast/store"
)

// RunSocketMode receives deliveries over Socket Mode until ctx is done. Each
// envelope is stored in the inbox, exactly as HTTP mode does, and only then
// acknowledged; one that cannot be stored is left unacknowledged so Slack
// redelivers it. client must be built on a Web API client carrying the app
// token (slack.OptionAppLevelToken).
func (b *Bridge) RunSocketMode(ctx context.Context, client *socketmode.Client) error {
	errc := make(chan error, 1)
	go func() { errc <- client.RunContext(ctx) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack socket mode: %w", err)
		case evt := <-client.Events:
			b.socketEvent(ctx, client, evt)
		}
	}
}

func (b *Bridge) socketEvent(ctx context.Context, client *socketmode.Client, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnected:
		b.log.Info("slack: socket mode connected")
		return
	case socketmode.EventTypeConnectionError, socketmode.EventTypeInvalidAuth, socketmode.EventTypeIncomingError:
		b.log.Warn("slack: socket mode trouble", slog.String("type", string(evt.Type)), slog.Any("data", evt.Data))
		return
	case socketmode.EventTypeEventsAPI, socketmode.EventTypeInteractive, socketmode.EventTypeSlashCommand:
	default:
		return
	}
	req := evt.Request
	if req == nil {
		return
	}
	switch evt.Type {
	case socketmode.EventTypeInteractive:
		in, err := ParseInteraction(req.Payload)
		if err != nil {
			b.ack(ctx, client, req.EnvelopeID, nil)
			return
		}
		// Modals open before the ack; clicks and submissions are stored.
		answer, err := b.interaction(ctx, in, req.Payload)
		if err != nil {
			b.log.Error("slack: storing socket mode interaction; leaving it unacknowledged", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
			return
		}
		var body any // not a nil *viewAnswer, which would be sent as null
		if answer != nil {
			body = answer
		}
		b.ack(ctx, client, req.EnvelopeID, body)
		return
	case socketmode.EventTypeSlashCommand:
		form, err := slashForm(req.Payload)
		if err != nil {
			b.ack(ctx, client, req.EnvelopeID, nil)
			return
		}
		resp, err := b.slashCommand(ctx, form)
		if err != nil {
			b.log.Error("slack: socket mode slash command; leaving it unacknowledged", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
			return
		}
		var body any
		if resp != nil {
			body = resp
		}
		b.ack(ctx, client, req.EnvelopeID, body)
		return
	}
	env, err := ParseEnvelope(req.Payload)
	if err != nil || env.Type != "event_callback" {
		b.log.Warn("slack: socket mode event not stored", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
		b.ack(ctx, client, req.EnvelopeID, nil) // malformed: redelivery would not help
		return
	}
	if err := b.Accept(ctx, store.SlackKindEvent, eventKey(env), eventThread(env), json.RawMessage(req.Payload)); err != nil {
		b.log.Error("slack: storing socket mode delivery; leaving it unacknowledged", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
		return
	}
	b.ack(ctx, client, req.EnvelopeID, nil)
}

// slashForm turns a Socket Mode slash command (JSON of the form's fields)
// into the form HTTP mode receives.
func slashForm(payload []byte) (url.Values, error) {
	var fields map[string]any
	if err := json.Unmarshal(payload, &fields); err != nil {
		return nil, err
	}
	form := url.Values{}
	for k, v := range fields {
		if s, ok := v.(string); ok {
			form.Set(k, s)
		}
	}
	if form.Get("command") == "" {
		return nil, fmt.Errorf("slash command without a command")
	}
	return form, nil
}

func (b *Bridge) ack(ctx context.Context, client *socketmode.Client, envelopeID string, body any) {
	if err := client.AckCtx(ctx, envelopeID, body); err != nil {
		b.log.Warn("slack: socket mode ack failed", slog.String("envelope_id", envelopeID), slog.Any("error", err))
	}
}
