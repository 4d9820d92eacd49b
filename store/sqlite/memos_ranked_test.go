package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestSearchRanksTheNewestMatches: a search matching more than maxRanked
// memos ranks the newest maxRanked of those the filters keep, so a filter
// that keeps only older memos still finds them, and the best match among
// the newest ranks first.
func TestSearchRanksTheNewestMatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "ranked.db"), Sync: "normal"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	var notes []string
	for i := range maxRanked + 200 {
		p := &store.MemoCreateParams{Title: fmt.Sprintf("Memo %d", i), Body: "otters and kelp", MemoType: "doc"}
		switch {
		case i < 10: // the oldest, and the only notes
			p.MemoType = "note"
		case i == maxRanked+100:
			p.Title = "Otters" // the best match, among the newest
		}
		m, err := db.MemoCreate(ctx, p)
		require.NoError(t, err)
		if p.MemoType == "note" {
			notes = append(notes, m.ID)
		}
	}
	found, err := db.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters", MemoType: "note", Limit: 50})
	require.NoError(t, err)
	var ids []string
	for _, m := range found {
		ids = append(ids, m.ID)
	}
	require.ElementsMatch(t, notes, ids, "the filter is applied before the newest are taken")

	found, err = db.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters", Limit: 50})
	require.NoError(t, err)
	require.Len(t, found, 50)
	require.Equal(t, "Otters", found[0].Title)
	for _, m := range found {
		require.NotContains(t, notes, m.ID, "older than the newest %d matches", maxRanked)
	}
}
