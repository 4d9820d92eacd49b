package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// BenchmarkEventAppend100k times appending an event among 100,000 sessions:
// SameSession keeps appending to one session (its activity stays in the
// current minute, the usual chat turn); OldSessions appends to a different
// long-quiet session each time, so every append moves the session's activity
// to a new minute and re-keys its text-search entry (the write's worst case).
func BenchmarkEventAppend100k(b *testing.B) {
	ctx := context.Background()
	db := openBench(b)
	seedSessions(b, db, 100_000)
	b.Run("SameSession", func(b *testing.B) {
		for b.Loop() {
			_, err := db.EventAppend(ctx, &store.EventAppendParams{SessionID: "ses_00000001", Type: store.EventUserMessage, Payload: map[string]any{"text": "hi"}})
			require.NoError(b, err)
		}
	})
	b.Run("OldSessions", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			_, err := db.EventAppend(ctx, &store.EventAppendParams{SessionID: fmt.Sprintf("ses_%08d", 2+i%99_000), Type: store.EventUserMessage, Payload: map[string]any{"text": "hi"}})
			require.NoError(b, err)
		}
	})
}
