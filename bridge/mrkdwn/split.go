package mrkdwn

import (
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// Slack's limits for a message built from section blocks. Exceeding any of
// them makes chat.postMessage fail outright (invalid_blocks / msg_too_long),
// so the splitter treats them as hard ceilings.
const (
	MaxSectionChars = 3000  // text of one section block
	MaxBlocks       = 50    // blocks in one message
	MaxMessageChars = 40000 // all text in one message
)

// charLen counts UTF-16 code units. Slack's documentation does not say how
// it counts characters; UTF-16 length is never below the rune count, so
// staying under the limit in UTF-16 is safe under either reading.
func charLen(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// Blocks renders md and splits it into Slack messages: each message is at most 50 blocks,
// each block a section with a mrkdwn text object of at most 3,000 characters, and each
// message's total text at most 40,000 characters. Splits prefer paragraph boundaries, then
// line boundaries, then hard cuts (never inside a `&amp;`-style entity or a UTF-8 rune; a code
// block split across sections is closed and reopened with ```).
//
// Sections are sent verbatim: links were already made explicit by Render, and
// verbatim stops Slack from turning stray text into mentions.
func Blocks(md []byte) [][]slack.Block {
	msgs := pack(sections(renderBlocks(md), MaxSectionChars), MaxBlocks, MaxMessageChars)
	out := make([][]slack.Block, len(msgs))
	for i, m := range msgs {
		bs := make([]slack.Block, len(m))
		for j, s := range m {
			bs[j] = slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, s, false, true), nil, nil)
		}
		out[i] = bs
	}
	return out
}

// sections packs top-level blocks into section texts of at most limit chars.
// Packing several paragraphs into one section (rather than one each) keeps
// long memos to few messages.
func sections(blocks [][]line, limit int) []string {
	var out []string
	cur, curN := "", 0
	emit := func(s string) {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	for _, bl := range blocks {
		t := joinLines(bl)
		n := charLen(t)
		if cur != "" && curN+2+n <= limit {
			cur += "\n\n" + t
			curN += 2 + n
			continue
		}
		if cur != "" {
			emit(cur)
			cur, curN = "", 0
		}
		if n <= limit {
			cur, curN = t, n
			continue
		}
		pieces := splitLines(bl, limit)
		for _, p := range pieces[:len(pieces)-1] {
			emit(p)
		}
		cur = pieces[len(pieces)-1]
		curN = charLen(cur)
	}
	emit(cur)
	return out
}

// splitLines splits one oversized block at line boundaries, hard-cutting
// lines that alone exceed limit. An open code fence is closed at the end of
// a piece and reopened at the start of the next so both halves render as
// code.
func splitLines(ls []line, limit int) []string {
	var out []string
	var cur []string
	curN := 0
	real := false // cur holds more than a reopened fence
	open, openFence := false, ""
	flush := func() {
		if !real {
			return
		}
		if open {
			cur = append(cur, openFence+"```")
		}
		out = append(out, strings.Join(cur, "\n"))
		cur, curN, real = nil, 0, false
		if open {
			cur = []string{openFence + "```"}
			curN = charLen(cur[0])
		}
	}
	add := func(t string, n int) {
		if len(cur) > 0 {
			curN++
		}
		cur = append(cur, t)
		curN += n
		real = true
	}
	for _, l := range ls {
		inCode := l.inCode
		// A fence too deep in quotes/lists to repeat cheaply is not worth
		// reopening; the lines are then split as plain text.
		fenceN := charLen(l.fence) + 3
		if inCode && fenceN > limit/4 {
			inCode = false
		}
		reserve := 0
		if inCode {
			reserve = 1 + fenceN
		}
		t := l.text
		n := charLen(t)
		sep := 0
		if len(cur) > 0 {
			sep = 1
		}
		if curN+sep+n+reserve > limit {
			flush()
			sep = 0
			if len(cur) > 0 {
				sep = 1
			}
		}
		for curN+sep+n+reserve > limit {
			// Hard cut: the line alone does not fit.
			avail := limit - curN - sep - reserve
			i := cutAt(t, avail)
			if i == 0 {
				if real {
					flush()
					sep = 0
					if len(cur) > 0 {
						sep = 1
					}
					continue
				}
				// Limit smaller than one rune: give up on the limit rather
				// than loop forever (only reachable with toy limits).
				_, i = utf8.DecodeRuneInString(t)
			}
			add(t[:i], charLen(t[:i]))
			open, openFence = inCode, l.fence
			flush()
			t = t[i:]
			n = charLen(t)
			sep = 0
			if len(cur) > 0 {
				sep = 1
			}
		}
		add(t, n)
		open, openFence = inCode, l.fence
	}
	if real || len(out) == 0 {
		open = false
		real = true
		flush()
	}
	return out
}

// cutAt returns the largest byte index i such that s[:i] is at most max
// chars, ends on a rune boundary and not inside an entity we emitted,
// preferring to cut after a space in the second half.
func cutAt(s string, max int) int {
	if max <= 0 {
		return 0
	}
	i, n := 0, 0
	for j, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if n+w > max {
			break
		}
		n += w
		i = j + utf8.RuneLen(r)
		if r == utf8.RuneError {
			// Invalid bytes decode as one-byte RuneError; step one byte.
			_, sz := utf8.DecodeRuneInString(s[j:])
			i = j + sz
		}
	}
	if i >= len(s) {
		return len(s)
	}
	// Every '&' in rendered text starts an entity (&amp; &lt; &gt;).
	if k := strings.LastIndexByte(s[max0(i-4):i], '&'); k >= 0 {
		k += max0(i - 4)
		for _, e := range []string{"&amp;", "&lt;", "&gt;"} {
			if strings.HasPrefix(s[k:], e) && k+len(e) > i {
				i = k
				break
			}
		}
	}
	if sp := strings.LastIndexByte(s[:i], ' '); sp >= 0 && sp+1 > i/2 {
		i = sp + 1
	}
	return i
}

func max0(i int) int { return max(i, 0) }

// pack groups sections into messages under both the block and text limits.
func pack(secs []string, maxBlocks, maxChars int) [][]string {
	var out [][]string
	var cur []string
	curN := 0
	for _, s := range secs {
		n := charLen(s)
		if len(cur) > 0 && (len(cur) >= maxBlocks || curN+n > maxChars) {
			out = append(out, cur)
			cur, curN = nil, 0
		}
		cur = append(cur, s)
		curN += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
