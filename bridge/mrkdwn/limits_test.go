package mrkdwn

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPathologicalMarkdownRendersInTime: a memo mirrored into Slack is
// rendered in linear time whatever its shape (goldmark's nested containers
// cost d² a line: 100 KB of `>` took 8.6 s), and keeps its words.
func TestPathologicalMarkdownRendersInTime(t *testing.T) {
	t.Parallel()
	for name, md := range map[string]string{
		"NestedQuotes": strings.Repeat(">", 100_000) + " hi\n",
		"NestedLists":  strings.Repeat("- ", 50_000) + "hi\n",
		"Emphasis":     strings.Repeat("*a_", 30_000) + " hi\n",
		"Links":        strings.Repeat("[a](", 30_000) + " hi\n",
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan string, 1)
			go func() { done <- Render([]byte(md)) }()
			select {
			case out := <-done:
				require.Contains(t, out, "hi")
			case <-time.After(5 * time.Second):
				t.Fatalf("%d bytes still rendering after 5 s", len(md))
			}
		})
	}
}
