package bridge

import (
	"context"
	"regexp"
	"strings"
	"unicode"

	"github.com/holdfast-bot/holdfast/bridge/mrkdwn"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
)

// Slack text as markdown (SPEC §5): messages are recorded in the transcript
// as markdown, which is what the console renders and a model reads, with
// Slack's raw text kept beside it.

// slackRef is one of Slack's angle-bracket references: <url|label>,
// <@U123>, <#C123|name>, <!here>, <!date^…|fallback>.
var slackRef = regexp.MustCompile(`<([^<>]*)>`)

// markdown turns Slack message text into markdown: links become
// [label](url) (a bare <url> its URL), user mentions @display name (looked
// up with users.info and cached; fetch false uses the cache alone, for
// paths that must not wait on Slack), channels #name, special mentions
// @here, the entities Slack escapes (&amp; &lt; &gt;) are decoded, and
// Slack's *bold* and ~strike~ are written as Markdown writes them.
func (b *Bridge) markdown(ctx context.Context, text string, fetch bool) string {
	text = mrkdwn.Emphasis(text)
	var sb strings.Builder
	last := 0
	for _, loc := range slackRef.FindAllStringSubmatchIndex(text, -1) {
		sb.WriteString(unescape(text[last:loc[0]]))
		sb.WriteString(b.reference(ctx, text[loc[2]:loc[3]], fetch))
		last = loc[1]
	}
	sb.WriteString(unescape(text[last:]))
	return sb.String()
}

// reference renders the inside of one <…> reference.
func (b *Bridge) reference(ctx context.Context, ref string, fetch bool) string {
	target, label, hasLabel := strings.Cut(ref, "|")
	target, label = unescape(target), unescape(label)
	switch {
	case strings.HasPrefix(target, "@"):
		id := target[1:]
		if name := b.userName(ctx, id, fetch); name != "" {
			return "@" + name
		}
		if hasLabel && label != "" {
			return "@" + strings.TrimPrefix(label, "@")
		}
		return "@" + id
	case strings.HasPrefix(target, "#"):
		if hasLabel && label != "" {
			return "#" + label
		}
		return target
	case strings.HasPrefix(target, "!"):
		if hasLabel && label != "" {
			return label // a user group's @handle, a date's fallback text
		}
		name, _, _ := strings.Cut(target[1:], "^")
		return "@" + name // @here, @channel, @everyone
	case hasLabel && label != "" && label != target:
		return "[" + label + "](" + target + ")"
	default:
		return target
	}
}

// said is the transcript payload of a Slack message, but for its
// markdown "text": Slack's raw text, who said it (id and display name),
// where and when, and whether it mentioned the bot.
func (b *Bridge) said(ctx context.Context, m *Message, mention bool) transcript.UserMessage {
	return transcript.UserMessage{Said: transcript.Said{Speaker: b.userName(ctx, m.User, true), SlackTS: m.TS},
		Fields: saidFields(m, mention)}
}

// saidFields is what the record of a Slack message keeps beside its
// markdown text and its speaker's name, whether it arrived live or was
// backfilled: Slack's raw text, who said it, where, and whether it
// mentioned the bot.
func saidFields(m *Message, mention bool) map[string]any {
	return map[string]any{"raw": m.Text, "user": m.User, "channel": m.Channel, "mention": mention}
}

// appendParams is the append of a Slack user's message to a session.
func appendParams(sessionID, user string, m transcript.UserMessage) *store.EventAppendParams {
	p := transcript.EncodePtr(m, actor(user))
	p.SessionID = sessionID
	return p
}

// commandOf splits a mention's markdown text (entities already decoded)
// into its first word and the rest, as ParseCommand does for raw text.
func commandOf(md string) Command {
	md = strings.TrimSpace(md)
	name, rest := md, ""
	// The word ends at a space or at the punctuation people put after a
	// verb ("reject: needs sources", "approve, looks good", "approve!").
	if i := strings.IndexFunc(md, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(afterVerb, r) }); i >= 0 {
		name, rest = md[:i], md[i:]
	}
	rest = strings.TrimLeftFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(afterVerb, r) })
	return Command{Name: strings.ToLower(strings.TrimPrefix(name, "/")), Arg: strings.TrimSpace(rest)}
}

// afterVerb is the punctuation that may follow a command word.
const afterVerb = ":,;.!?"
