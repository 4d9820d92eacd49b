package mrkdwn

import "strings"

// Emphasis rewrites Slack's own emphasis in text people wrote in Slack as
// Markdown reads it: *bold* becomes **bold** and ~struck~ becomes
// ~~struck~~ (_italic_ means the same in both). Markdown reads a single
// `*` as italic, so without this what someone bolded in Slack would come
// back italic wherever the transcript is rendered (the console, a summary
// posted to the thread). Code spans and ``` blocks are copied as they are,
// and a marker counts only where Slack honours it: opening a word after a
// space or punctuation, closing one on the same line before a space,
// punctuation or the end. Everything else is left alone, so "2*3*4" and
// "* item" keep their stars.
func Emphasis(text string) string {
	if !strings.ContainsAny(text, "*~") {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + 8)
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "```"):
			end := strings.Index(text[i+3:], "```")
			if end < 0 {
				b.WriteString(text[i:])
				return b.String()
			}
			b.WriteString(text[i : i+3+end+3])
			i += 3 + end + 3
		case text[i] == '`':
			end := strings.IndexByte(text[i+1:], '`')
			if end < 0 {
				b.WriteString(text[i:])
				return b.String()
			}
			b.WriteString(text[i : i+1+end+1])
			i += 1 + end + 1
		case (text[i] == '*' || text[i] == '~') && i+1 < len(text) && text[i+1] == text[i]:
			// A doubled marker is Markdown already, or no marker to Slack.
			j := i
			for j < len(text) && text[j] == text[i] {
				j++
			}
			b.WriteString(text[i:j])
			i = j
		case (text[i] == '*' || text[i] == '~') && (i == 0 || opensAfter(text[i-1])):
			if j := closing(text, i); j > 0 {
				m := text[i : i+1]
				b.WriteString(m + m + text[i+1:j] + m + m)
				i = j + 1
				continue
			}
			b.WriteByte(text[i])
			i++
		default:
			b.WriteByte(text[i])
			i++
		}
	}
	return b.String()
}

// closing answers where the marker at text[i] closes (0: it does not): the
// next same marker on its line, with no code in between, after something
// other than a space and before a space, punctuation or the end, the span
// starting with something other than a space.
func closing(text string, i int) int {
	m := text[i]
	if i+1 >= len(text) || isSpace(text[i+1]) {
		return 0
	}
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case c == '\n', c == '`':
			return 0
		case c == m && j+1 < len(text) && text[j+1] == m:
			return 0 // a doubled marker closes nothing
		case c == m && !isSpace(text[j-1]) && (j+1 == len(text) || closesBefore(text[j+1])):
			return j
		}
	}
	return 0
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// opensAfter and closesBefore are the characters around which Slack takes
// a marker as one (nested _*x*_ included).
func opensAfter(c byte) bool   { return isSpace(c) || strings.IndexByte(`([{"'>_~*`, c) >= 0 }
func closesBefore(c byte) bool { return isSpace(c) || strings.IndexByte(`.,;:!?)]}"'<_~*`, c) >= 0 }
