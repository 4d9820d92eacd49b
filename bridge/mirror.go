package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
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

// escNames is esc for the engine's sentences (refusals, why a run or a
// session ended): the people they name are named as requester names them,
// a Slack user by mention, a console user by name.
func (b *Bridge) escNames(ctx context.Context, s string) string {
	return engine.PeopleIn(esc(s), func(uid string) string { return b.requester(ctx, uid) })
}

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
		te := transcript.Read(ctx, b.log, &ev.Event)
		out := b.mirrorEvent(ctx, ev, te, batch)
		if len(out) > 0 {
			tc := b.runTrace(ctx, transcript.RunOf(te), traces)
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
func (b *Bridge) runTrace(ctx context.Context, id string, seen map[string]string) string {
	if b.cfg.Tracer == nil {
		return ""
	}
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

// mirrorEvent answers the Slack messages one transcript event (te, as
// read from ev) becomes. The events carry what the messages show: only a
// line written before they did is completed from the store.
func (b *Bridge) mirrorEvent(ctx context.Context, ev *store.SlackMirrorEvent, te transcript.Event,
	batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	channel, thread, ok := parseTag(ev.Tag)
	if !ok {
		return nil
	}
	key := fmt.Sprintf("ev:%d", ev.ID)
	line := func(text string) []*store.SlackOutboxAddParams {
		return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
			Channel: channel, ThreadTS: postTS(thread), Text: text}}
	}
	switch e := te.(type) {
	case transcript.RunStarted:
		started := line(fmt.Sprintf(":arrow_forward: Started `%s` — %s.", esc(e.Command), b.runLink(e.RunID, "follow it in the console")))
		if e.DedupeKey == "" { // a line written before it named the item's key
			if it, err := b.store.QueueItemGetByID(ctx, e.ItemID); err == nil {
				e.DedupeKey = it.DedupeKey
			}
		}
		if strings.HasPrefix(e.DedupeKey, "slack:") {
			// Enqueued by a message in this thread: its acknowledgement
			// goes first, if the inbox worker has not queued it yet.
			return append([]*store.SlackOutboxAddParams{queuedAck(channel, thread, strings.TrimPrefix(e.Command, "/"), e.ItemID)}, started...)
		}
		return started
	case transcript.HoldOpened:
		return append(b.holdCards(ctx, channel, thread, e), b.homeUpdates(ctx, key)...)
	case transcript.HoldApprovedPartial:
		return append(b.holdApprovedPartial(ctx, key, e, batch), b.homeUpdates(ctx, key)...)
	case transcript.HoldDecided:
		return append(b.holdDecided(ctx, key, channel, thread, ev.TS, e, batch), b.homeUpdates(ctx, key)...)
	case transcript.HoldReminder:
		return b.holdReminder(ctx, key, channel, thread, e)
	case transcript.UserMessage:
		return b.consoleMessage(ctx, key, channel, thread, ev, e)
	case transcript.PolicySet:
		return b.policyNotice(ctx, key, channel, thread, ev, e)
	case transcript.Command:
		// A session command from outside Slack, said in the thread before
		// its answer (mirrored as any reply is) or its effects.
		if who, ok := b.outsider(ctx, ev.Actor); ok {
			return line(who + ": `" + esc(e.Command) + "`")
		}
	case transcript.RunFinished:
		switch e.Status {
		case store.RunFailed, store.RunCancelled, store.RunRecoveryExhausted:
			ended := strings.ReplaceAll(e.Status, "_", " ")
			if e.Status == store.RunCancelled {
				ended = "was " + ended
			}
			msg := fmt.Sprintf(":x: %s %s", b.runLink(e.RunID, "The run"), ended)
			if e.ErrorKind != "" && e.ErrorKind != e.Status {
				msg += fmt.Sprintf(" (%s)", esc(e.ErrorKind))
			}
			if rest, ok := strings.CutPrefix(e.Error, "run "+e.Status+" "); ok {
				msg += " " + b.escNames(ctx, engine.FirstLine(rest, 300)) // "run cancelled by …" goes on the line's own "cancelled"
			} else if e.Error != "" {
				msg += ": " + b.escNames(ctx, engine.FirstLine(e.Error, 300))
			}
			return line(msg + ".")
		}
		return nil
	case transcript.MemoDispatched:
		return b.memoMessages(ctx, key, channel, thread, e)
	case transcript.AssistantMessage:
		if e.Backfilled || e.Posted {
			return nil // fetched from the thread, or posted there: it is there already
		}
		return markdownMessages(key, channel, thread, "", e.Text)
	}
	return nil
}

// runLink links a run's console page, labelled with words, not its id.
func (b *Bridge) runLink(runID, label string) string {
	return fmt.Sprintf("<%s/runs/%s|%s>", b.cfg.BaseURL, runID, label)
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

// memoMessages posts a dispatched memo into the thread: the body its line
// carries, or for a line written before it did, the memo's as stored.
func (b *Bridge) memoMessages(ctx context.Context, key, channel, thread string, e transcript.MemoDispatched) []*store.SlackOutboxAddParams {
	link := fmt.Sprintf("<%s/memos/%s|%s>", b.cfg.BaseURL, e.MemoID, esc(orDefault(e.Title, e.MemoID)))
	if e.Body == "" {
		m, err := b.store.MemoGetByID(ctx, e.MemoID)
		if err != nil {
			b.log.WarnContext(ctx, "slack: dispatched memo unreadable; posting its link only", slog.String("memo_id", e.MemoID),
				slog.String("run_id", e.RunID), slog.Any("error", err))
			return []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: queueOf(channel, thread), Method: store.SlackPost,
				Channel: channel, ThreadTS: postTS(thread), Text: ":page_facing_up: Memo dispatched: " + link}}
		}
		e.Body = m.Body
	}
	return markdownMessages(key, channel, thread, ":page_facing_up: Memo dispatched: "+link, e.Body)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func cardKey(holdID, where string) string { return "card:" + holdID + ":" + where }

// queuedCard answers a hold's card as queued, by this mirror page or
// earlier (the one read-back the mirror makes: an update must name the
// message it changes); nil when no card was queued there.
func (b *Bridge) queuedCard(ctx context.Context, holdID, where string, batch map[string]*store.SlackOutboxAddParams) *store.SlackOutboxAddParams {
	if card := batch[cardKey(holdID, where)]; card != nil {
		return card
	}
	stored, err := b.store.SlackOutboxGetByKey(ctx, cardKey(holdID, where))
	if err != nil {
		return nil
	}
	return &stored.SlackOutboxAddParams
}

// card answers a hold's card as queued and its blocks; nil when no card
// was queued there.
func (b *Bridge) card(ctx context.Context, holdID, where string, batch map[string]*store.SlackOutboxAddParams) (*store.SlackOutboxAddParams, []map[string]any) {
	card := b.queuedCard(ctx, holdID, where, batch)
	if card == nil {
		return nil, nil
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

// mentionAll writes Slack user ids as mentions.
func mentionAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "<@" + id + ">"
	}
	return out
}

// holdApprovedPartial updates every card of a hold that some, not all, of
// its stewards have approved: the approvals so far show above the buttons,
// which stay for the others. Each approval is its own update (keyed by the
// event), queued behind the card in its thread, so the last one wins.
func (b *Bridge) holdApprovedPartial(ctx context.Context, key string, e transcript.HoldApprovedPartial,
	batch map[string]*store.SlackOutboxAddParams) []*store.SlackOutboxAddParams {
	holdID := e.HoldID
	who := make([]string, 0, len(e.Approvals))
	for _, a := range e.Approvals {
		who = append(who, mention(orDefault(a.By, "someone")))
	}
	required := "?"
	if e.Required > 0 {
		required = strconv.Itoa(e.Required)
	}
	status := fmt.Sprintf(":ballot_box_with_check: %d of %s approvals: %s", len(who), required, strings.Join(who, ", "))
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
