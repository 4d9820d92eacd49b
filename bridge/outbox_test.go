package bridge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/store"
)

// TestAHangingChannelHoldsUpOnlyItsThread: the outbox keeps a sender per
// thread in flight and claims the next thread's message as soon as a sender
// is free, so a post Slack does not answer delays that thread alone. The
// sender used to wait for every post of a pass before claiming again: one
// hanging channel held every other thread's messages.
func TestAHangingChannelHoldsUpOnlyItsThread(t *testing.T) {
	t.Parallel()
	tb := setup(t, standIns())
	arrived, release := tb.slack.Stall("chat.postMessage", "CSLOW")
	defer release()
	add := func(key, channel string) {
		_, err := tb.store.SlackOutboxAdd(tb.ctx, []*store.SlackOutboxAddParams{{DedupeKey: key, Queue: channel + ":",
			Method: store.SlackPost, Channel: channel, Text: "text of " + key}})
		require.NoError(t, err)
	}
	sent := func(key string) func() bool {
		return func() bool {
			m, err := tb.store.SlackOutboxGetByKey(tb.ctx, key)
			return err == nil && m.Status == store.SlackOutboxSentSt
		}
	}
	add("slow", "CSLOW")
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the post to CSLOW never reached Slack")
	}
	add("fast", "CFAST")
	tb.eventually(t, sent("fast"), 5*time.Second, "a post to another channel goes out while CSLOW hangs")
	m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, store.SlackOutboxPending, m.Status, "the hanging post is still on the wire")
	release()
	tb.eventually(t, sent("slow"), 10*time.Second, "and the hanging post is recorded once Slack answers")
	tb.idle(t)
	require.Len(t, tb.slack.Messages("CSLOW"), 1)
	require.Len(t, tb.slack.Messages("CFAST"), 1)
}

// TestAnUnansweredPostIsGivenUpAndTriedAgain: a post Slack never answers
// (a half-open connection) fails after CallTimeout and is retried, looked
// for in Slack first, so the thread's queue moves on. The call used to have
// no deadline: the post waited, its claim renewed, until a restart.
func TestAnUnansweredPostIsGivenUpAndTriedAgain(t *testing.T) {
	t.Parallel()
	o := standIns()
	o.cfg = func(c *bridge.Config) { c.CallTimeout = 300 * time.Millisecond }
	tb := setup(t, o)
	arrived, release := tb.slack.Stall("chat.postMessage", "CHUNG")
	defer release()
	_, err := tb.store.SlackOutboxAdd(tb.ctx, []*store.SlackOutboxAddParams{{DedupeKey: "hung", Queue: "CHUNG:",
		Method: store.SlackPost, Channel: "CHUNG", Text: "still there?"}})
	require.NoError(t, err)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the post never reached Slack")
	}
	tb.eventually(t, func() bool {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "hung")
		return err == nil && m.Attempts >= 1 && m.Status == store.SlackOutboxPending
	}, 10*time.Second, "the unanswered post is given up and kept for a retry")
	release()
	tb.eventually(t, func() bool {
		m, err := tb.store.SlackOutboxGetByKey(tb.ctx, "hung")
		return err == nil && m.Status == store.SlackOutboxSentSt
	}, 15*time.Second, "and sent once Slack answers again")
	tb.idle(t)
	require.Len(t, tb.slack.Messages("CHUNG"), 1)
}
