package sqlite_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

var benchWords = []string{"otter", "heron", "kingfisher", "estuary", "tide", "reed", "brief", "digest", "style", "review"}

// libraryOf10k opens a store holding 10,000 memos, as the foundation issue's
// benchmarks ask.
func libraryOf10k(b *testing.B) (*store.Memo, store.Store) {
	db := openTemp(b)
	ctx := context.Background()
	var first *store.Memo
	for i := range 10_000 {
		body := fmt.Sprintf("Memo %d about the %s and the %s near the %s.", i, benchWords[i%10], benchWords[(i/10)%10], benchWords[(i/100)%10])
		m, err := db.MemoCreate(ctx, &store.MemoCreateParams{Title: fmt.Sprintf("Memo %d", i), Body: body})
		require.NoError(b, err)
		if first == nil {
			first = m
		}
	}
	return first, db
}

func BenchmarkMemoLibrary10k(b *testing.B) {
	ctx := context.Background()
	first, s := libraryOf10k(b)

	b.Run("Create", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "bench", Body: fmt.Sprintf("bench body %d", i)})
			require.NoError(b, err)
		}
	})
	b.Run("Update", func(b *testing.B) {
		version := first.ContentVersion
		for i := 0; b.Loop(); i++ {
			body := fmt.Sprintf("updated body %d", i)
			m, err := s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: first.ID, ExpectedVersion: version, Body: &body})
			require.NoError(b, err)
			version = m.ContentVersion
		}
	})
	b.Run("Search", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: benchWords[i%10] + " " + benchWords[(i+3)%10], Limit: 20})
			require.NoError(b, err)
			require.NotEmpty(b, found)
		}
	})
}
