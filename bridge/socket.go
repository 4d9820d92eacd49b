package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

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
	case socketmode.EventTypeEventsAPI, socketmode.EventTypeInteractive:
	default:
		return
	}
	req := evt.Request
	if req == nil {
		return
	}
	var kind, key string
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		env, err := ParseEnvelope(req.Payload)
		if err != nil || env.Type != "event_callback" {
			b.log.Warn("slack: socket mode event not stored", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
			b.ack(ctx, client, req.EnvelopeID) // malformed: redelivery would not help
			return
		}
		kind, key = store.SlackKindEvent, env.EventID
	case socketmode.EventTypeInteractive:
		in, err := ParseInteraction(req.Payload)
		if err != nil || in.Type != "block_actions" {
			b.ack(ctx, client, req.EnvelopeID)
			return
		}
		kind, key = store.SlackKindInteraction, interactionKey(req.Payload)
	}
	if err := b.Accept(ctx, kind, key, json.RawMessage(req.Payload)); err != nil {
		b.log.Error("slack: storing socket mode delivery; leaving it unacknowledged", slog.String("envelope_id", req.EnvelopeID), slog.Any("error", err))
		return
	}
	b.ack(ctx, client, req.EnvelopeID)
}

func (b *Bridge) ack(ctx context.Context, client *socketmode.Client, envelopeID string) {
	if err := client.AckCtx(ctx, envelopeID, nil); err != nil {
		b.log.Warn("slack: socket mode ack failed", slog.String("envelope_id", envelopeID), slog.Any("error", err))
	}
}
