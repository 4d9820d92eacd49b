package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// Hold card action ids (SPEC §5).
const (
	actionApprove = "hold_approve"
	actionReject  = "hold_reject"
)

// mirrorBatch is how many transcript events one mirror pass reads.
const mirrorBatch = 100

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// esc escapes text for mrkdwn.
func esc(s string) string { return escaper.Replace(s) }

// mirrorOnce turns the next page of Slack sessions' transcript events into
// outbox messages, moving the cursor in the same transaction.
//
// The store wakes the mirror after every transcript write, Slack-bound or
// not, so a pass must cost what was written since the last one: a page that
// finds no (more) Slack events moves the in-memory cursor past every event
// the store had notified before the read, so the next pass does not walk
// them again.
func (b *Bridge) mirrorOnce(ctx context.Context) (bool, error) {
	if !b.mirror.loaded {
		cur, err := b.store.SlackMirrorCursor(ctx)
		if err != nil {
			return false, err
		}
		b.mirror.cur, b.mirror.loaded = cur, true
	}
	seen := b.committed.Load() // every event up to seen is committed: this read sees them all
	evs, err := b.store.SlackMirrorEvents(ctx, b.mirror.cur, mirrorBatch)
	if err != nil {
		return false, err
	}
	if len(evs) == 0 {
		b.mirror.cur = max(b.mirror.cur, seen)
		return false, nil
	}
	var msgs []*store.SlackOutboxAddParams
	batch := map[string]*store.SlackOutboxAddParams{} // cards queued by this page, not yet committed
	traces := map[string]string{}                     // run id → its item's trace context
	for _, ev := range evs {
		out := b.mirrorEvent(ctx, ev, batch)
		if len(out) > 0 {
			tc := b.runTrace(ctx, ev, traces)
			for _, m := range out {
				if m.TraceContext == "" {
					m.TraceContext = tc
				}
			}
		}
		for _, m := range out {
			batch[m.DedupeKey] = m
			msgs = append(msgs, m)
		}
	}
	n, err := b.store.SlackMirrorAdvance(ctx, evs[len(evs)-1].ID, msgs)
	if err != nil {
		return false, err
	}
	b.mirror.cur = max(b.mirror.cur, evs[len(evs)-1].ID)
	if len(evs) < mirrorBatch {
		b.mirror.cur = max(b.mirror.cur, seen)
	}
	b.metrics.queued.Add(float64(n))
	if n > 0 {
		wake(b.outboxWake)
	}
	return len(evs) == mirrorBatch, nil
}

// runTrace is the trace context of the run a transcript event is about, so
// what the mirror posts for it (progress, cards, the dispatched memo) joins
// the run's trace. Only a tracing bridge reads it.
func (b *Bridge) runTrace(ctx context.Context, ev *store.SlackMirrorEvent, seen map[string]string) string {
	if b.cfg.Tracer == nil {
		return ""
	}
	id := str(ev.Payload, "runId")
	if id == "" {
		return ""
	}
	if tc, ok := seen[id]; ok {
		return tc
	}
	tc := ""
	if r, err := b.store.RunGetByID(ctx, id); err == nil {
		tc = r.TraceContext
	}
	seen[id] = tc
	return tc
}

func str(p map[string]any, k string) string {
	switch v := p[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// mirrorEvent answers the Slack messages one transcript event becomes.
func (b *Bridge) mirrorEvent(ctx context.Context, ev *store.SlackMirrorEvent, batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	channel, thread, ok := parseTag(ev.Tag)
	if !ok {
		return nil
	}
	p := ev.Payload
	key := fmt.Sprintf("ev:%d", ev.ID)
	line := func(text string) []*store.SlackOutboxAddParams {
		return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
			Channel: channel, ThreadTS: postTS(thread), Text: text}}
	}
	switch ev.Type {
	case "run_started":
		started := line(fmt.Sprintf(":arrow_forward: Started `%s` — run `%s`.", esc(str(p, "command")), esc(str(p, "runId"))))
		if it, err := b.store.QueueItemGetByID(ctx, str(p, "itemId")); err == nil && strings.HasPrefix(it.DedupeKey, "slack:") {
			// Enqueued by a message in this thread: its acknowledgement
			// goes first, if the inbox worker has not queued it yet.
			return append([]*store.SlackOutboxAddParams{queuedAck(channel, thread, strings.TrimPrefix(it.Command, "/"), it.ID)}, started...)
		}
		return started
	case "hold_opened":
		return append(b.holdCards(ctx, channel, thread, p), b.homeUpdates(ctx, key)...)
	case "hold_approved_partial":
		return append(b.holdApprovedPartial(ctx, key, p, batch), b.homeUpdates(ctx, key)...)
	case "hold_decided":
		return append(b.holdDecided(ctx, key, channel, thread, ev.TS, p, batch), b.homeUpdates(ctx, key)...)
	case engine.EventHoldReminder:
		return b.holdReminder(ctx, key, channel, thread, p)
	case store.EventUserMessage:
		return b.consoleMessage(ctx, key, channel, thread, ev)
	case "run_finished":
		switch st := str(p, "status"); st {
		case "failed", "cancelled", "recovery_exhausted":
			msg := fmt.Sprintf(":x: Run `%s` %s", esc(str(p, "runId")), strings.ReplaceAll(st, "_", " "))
			if k := str(p, "errorKind"); k != "" {
				msg += fmt.Sprintf(" (%s)", esc(k))
			}
			if e := str(p, "error"); e != "" {
				msg += ": " + esc(firstLine(e, 300))
			}
			return line(msg + ".")
		}
		return nil
	case "memo_dispatched":
		return b.memoMessages(ctx, key, channel, thread, p)
	case "assistant_message":
		if p["backfilled"] == true {
			return nil // fetched from the thread: it is there already
		}
		return markdownMessages(key, channel, thread, "", str(p, "text"))
	}
	return nil
}

// markdownMessages renders markdown into as many messages as Slack's limits
// need; lead, when set, is a line of its own before them (so it can never
// push a full message over a limit).
func markdownMessages(key, channel, thread, lead, md string) []*store.SlackOutboxAddParams {
	var out []*store.SlackOutboxAddParams
	if lead != "" {
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: key + ":lead", Queue: queueOf(channel, thread),
			Method: store.SlackPost, Channel: channel, ThreadTS: postTS(thread), Text: lead})
	}
	fallback := mrkdwn.Fallback([]byte(md), 300)
	for i, blocks := range mrkdwn.Blocks([]byte(md)) {
		bj, err := json.Marshal(blocks)
		if err != nil {
			continue // slack-go's block types always marshal
		}
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: fmt.Sprintf("%s:%d", key, i), Queue: queueOf(channel, thread),
			Method: store.SlackPost, Channel: channel, ThreadTS: postTS(thread), Text: fallback, Blocks: string(bj)})
	}
	return out
}

// memoMessages posts a dispatched memo, read from the store, into the thread.
func (b *Bridge) memoMessages(ctx context.Context, key, channel, thread string, p map[string]any) []*store.SlackOutboxAddParams {
	id := str(p, "memoId")
	link := fmt.Sprintf("<%s/memos/%s|%s>", b.cfg.BaseURL, id, esc(orDefault(str(p, "title"), id)))
	m, err := b.store.MemoGetByID(ctx, id)
	if err != nil {
		b.log.WarnContext(ctx, "slack: dispatched memo unreadable; posting its link only", slog.String("memo_id", id), slog.Any("error", err))
		return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
			Channel: channel, ThreadTS: postTS(thread), Text: ":page_facing_up: Memo dispatched: " + link}}
	}
	return markdownMessages(key, channel, thread, ":page_facing_up: Memo dispatched: "+link, m.Body)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func cardKey(holdID, where string) string { return "card:" + holdID + ":" + where }

// card answers a hold's card as queued (by this mirror page or earlier) and
// its blocks; nil when no card was queued there.
func (b *Bridge) card(ctx context.Context, holdID, where string, batch map[string]*store.SlackOutboxAddParams) (*store.SlackOutboxAddParams, []map[string]any) {
	card := batch[cardKey(holdID, where)]
	if card == nil {
		stored, err := b.store.SlackOutboxGetByKey(ctx, cardKey(holdID, where))
		if err != nil {
			return nil, nil
		}
		card = &stored.SlackOutboxAddParams
	}
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(card.Blocks), &blocks); err != nil {
		return nil, nil
	}
	return card, blocks
}

// mention names a decider as Slack shows them: a Slack user as a mention,
// anyone else by name.
func mention(who string) string {
	if id, ok := strings.CutPrefix(who, "slack:"); ok {
		return "<@" + id + ">"
	}
	return esc(who)
}

// holdApprovedPartial updates every card of a hold that some, not all, of
// its stewards have approved: the approvals so far show above the buttons,
// which stay for the others. Each approval is its own update (keyed by the
// event), queued behind the card in its thread, so the last one wins.
func (b *Bridge) holdApprovedPartial(ctx context.Context, key string, p map[string]any,
	batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	holdID := str(p, "holdId")
	var who []string
	if as, ok := p["approvals"].([]any); ok {
		for _, a := range as {
			if m, ok := a.(map[string]any); ok {
				who = append(who, mention(orDefault(str(m, "by"), "someone")))
			}
		}
	}
	status := fmt.Sprintf(":ballot_box_with_check: %d of %s approvals: %s", len(who), orDefault(str(p, "required"), "?"), strings.Join(who, ", "))
	var out []*store.SlackOutboxAddParams
	for _, where := range []string{"thread", "holds"} {
		card, blocks := b.card(ctx, holdID, where, batch)
		if card == nil {
			continue
		}
		shown := make([]map[string]any, 0, len(blocks)+1)
		for _, bl := range blocks {
			if bl["type"] == "actions" {
				shown = append(shown, map[string]any{"type": "context", "block_id": "approvals:" + holdID,
					"elements": []any{map[string]any{"type": "mrkdwn", "text": status}}})
			}
			shown = append(shown, bl)
		}
		bj, _ := json.Marshal(shown)
		out = append(out, &store.SlackOutboxAddParams{DedupeKey: key + ":" + where, Queue: card.Queue,
			Method: store.SlackUpdate, Channel: card.Channel, Text: card.Text, Blocks: string(bj), RefKey: card.DedupeKey})
	}
	return out
}
