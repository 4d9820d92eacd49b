package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestMemoSearchUsesIndexes: every filter of the search grammar (SPEC
// §4.1) is served by an index: a tag filter walks memo_tags_listing newest
// first (no sort, no scan of the memos carrying the tag), further tags and
// tags beside text are primary-key probes, and type and since without a tag
// walk memos_type_updated.
func TestMemoSearchUsesIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	week := time.Now().Add(-7 * 24 * time.Hour)
	for _, tc := range []struct {
		name   string
		p      store.MemoSearchParams
		want   []string
		sorted bool // a sort is expected (and cheap)
	}{
		{name: "TagSince", p: store.MemoSearchParams{MemoType: "note", Tags: []string{"brief"}, UpdatedSince: week, Limit: 5},
			want: []string{"memo_tags_listing (tag=? AND memo_type=? AND updated_at>?)"}},
		{name: "Tag", p: store.MemoSearchParams{MemoType: "note", Tags: []string{"brief"}},
			want: []string{"memo_tags_listing (tag=? AND memo_type=?)"}},
		{name: "TagIncludingUnlisted", p: store.MemoSearchParams{MemoType: "note", Tags: []string{"brief"}, UpdatedSince: week, IncludeUnlisted: true},
			want: []string{"memo_tags_listing (tag=? AND memo_type=? AND updated_at>?)"}},
		{name: "TwoTags", p: store.MemoSearchParams{MemoType: "note", Tags: []string{"brief", "otters"}, UpdatedSince: week},
			want: []string{"memo_tags_listing (tag=? AND memo_type=? AND updated_at>?)", "PRIMARY KEY (memo_rowid=? AND tag=?)"}},
		{name: "TagAndText", p: store.MemoSearchParams{Query: "otters", MemoType: "note", Tags: []string{"brief"}, UpdatedSince: week},
			want: []string{"SCAN memos_fts VIRTUAL TABLE INDEX 0:M", "PRIMARY KEY (memo_rowid=? AND tag=?)"}, sorted: true},
		{name: "Text", p: store.MemoSearchParams{Query: "otters"}, want: []string{"SCAN memos_fts VIRTUAL TABLE INDEX 0:M"}, sorted: true},
		{name: "TextAndType", p: store.MemoSearchParams{Query: "otters", MemoType: "note"},
			want: []string{"SCAN memos_fts VIRTUAL TABLE INDEX 0:M"}, sorted: true},
		{name: "TextTypeSince", p: store.MemoSearchParams{Query: "otters", MemoType: "note", UpdatedSince: week},
			want: []string{"SCAN memos_fts VIRTUAL TABLE INDEX 0:M"}, sorted: true},
		{name: "TypeSince", p: store.MemoSearchParams{MemoType: "note", UpdatedSince: week},
			want: []string{"memos_type_updated (memo_type=? AND updated_at>?)"}},
		{name: "Type", p: store.MemoSearchParams{MemoType: "workflow"}, want: []string{"memos_type_updated (memo_type=?)"}},
		{name: "AnyTypeSince", p: store.MemoSearchParams{UpdatedSince: week}, want: []string{"memos_updated (updated_at>?)"}},
		// Every type with a tag: the tag's memos are sorted. Only the
		// console's "All types" asks it.
		{name: "AnyTypeTag", p: store.MemoSearchParams{Tags: []string{"brief"}}, want: []string{"memo_tags_listing (tag=?)"}, sorted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, args, _ := memoSearchQuery(&tc.p)
			got := queryPlan(t, db, q, args...)
			for _, w := range tc.want {
				require.Contains(t, got, w, "%s:\n%s", q, got)
			}
			if !tc.sorted {
				require.NotContains(t, got, "TEMP B-TREE", "sorts:\n%s", got)
			}
			require.NotRegexp(t, `(?m)^SCAN (m|t)$`, got, "scans:\n%s", got)
		})
	}
}
