package search

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

func TestParse(t *testing.T) {
	t.Parallel()
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name string
		in   string
		want Query
	}{
		{"Empty", "", Query{Type: TypeNote}},
		{"Words", "otters  in\twinter", Query{Text: "otters in winter", Type: TypeNote}},
		{"Phrase", `"sandy   banks" otters`, Query{Text: `"sandy banks" otters`, Type: TypeNote}},
		{"UnclosedPhraseRunsToTheEnd", `otters "sandy banks`, Query{Text: `otters "sandy banks"`, Type: TypeNote}},
		{"EmptyPhraseSaysNothing", `"" otters`, Query{Text: "otters", Type: TypeNote}},
		{"Tag", "tag:brief", Query{Tags: []string{"brief"}, Type: TypeNote}},
		{"TagKeyAnyCase", "TAG:Brief", Query{Tags: []string{"Brief"}, Type: TypeNote}},
		{"QuotedTag", `tag:"needs review" otters`, Query{Text: "otters", Tags: []string{"needs review"}, Type: TypeNote}},
		{"TagsRepeatedOnce", "tag:brief tag:BRIEF tag:otter", Query{Tags: []string{"brief", "otter"}, Type: TypeNote}},
		{"TagWithColon", "tag:team:ops", Query{Tags: []string{"team:ops"}, Type: TypeNote}},
		{"TypeWorkflow", "type:workflow", Query{Type: TypeWorkflow, TypeGiven: true}},
		{"TypeNoteRepeated", "type:note type:NOTE", Query{Type: TypeNote, TypeGiven: true}},
		{"TypeAny", "type:any digest", Query{Text: "digest", Type: TypeAny, TypeGiven: true}},
		{"SinceDays", "since:7d", Query{Type: TypeNote, Since: week}},
		{"SinceWeeks", "since:1w", Query{Type: TypeNote, Since: week}},
		{"SinceHours", "since:36h", Query{Type: TypeNote, Since: 36 * time.Hour}},
		{"SinceGoDuration", "since:1h30m", Query{Type: TypeNote, Since: 90 * time.Minute}},
		{"SinceRepeatedSame", "since:7d since:168h", Query{Type: TypeNote, Since: week}},
		{"Limit", "limit:12", Query{Type: TypeNote, Limit: 12}},
		{"LimitMax", "limit:50", Query{Type: TypeNote, Limit: 50}},
		{"FiltersOnly", "tag:brief since:7d", Query{Tags: []string{"brief"}, Type: TypeNote, Since: week}},
		{"Everything", `weekly "otter census" tag:brief type:note since:7d limit:3`,
			Query{Text: `weekly "otter census"`, Tags: []string{"brief"}, Type: TypeNote, TypeGiven: true, Since: week, Limit: 3}},
		{"FilterAmongWords", "otters tag:brief winter", Query{Text: "otters winter", Tags: []string{"brief"}, Type: TypeNote}},
		{"UnknownKeyIsText", "title:kingfisher 12:30 https://example.com/x", Query{Text: "title:kingfisher 12:30 https://example.com/x", Type: TypeNote}},
		{"QuotedFilterIsText", `"tag:brief"`, Query{Text: `"tag:brief"`, Type: TypeNote}},
		{"ColonAloneIsText", ": :x", Query{Text: ": :x", Type: TypeNote}},
		{"ControlAndInvalidUTF8Dropped", "ot\x00ters \xff tag:br\x01ief", Query{Text: "otters", Tags: []string{"brief"}, Type: TypeNote}},
		{"OperatorsAreText", "NEAR(a b) AND *", Query{Text: "NEAR(a b) AND *", Type: TypeNote}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			require.NoError(t, err)
			tc.want.Written = tc.in != "" // every case but Empty writes something
			require.Equal(t, tc.want, *got)
			again, err := Parse(got.String())
			require.NoError(t, err, "the canonical form %q parses", got.String())
			require.Equal(t, *got, *again, "the canonical form %q reads back as the query", got.String())
		})
	}
}

func TestParseRefusesBadFilters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, says string
	}{
		{"EmptyTag", "tag:", "tag: needs a tag"},
		{"EmptyQuotedTag", `tag:""`, "tag: needs a tag"},
		{"TagThenSpace", `tag: "x"`, "tag: needs a tag"},
		{"LongTag", "tag:" + strings.Repeat("t", store.MaxNameChars+1), "longer than"},
		{"TooManyTags", manyTags(store.MaxTags + 1), "at most 50 tags"},
		{"UnknownType", "type:recipe", "type:recipe is not a memo type"},
		{"EmptyType", "type:", "is not a memo type"},
		{"TwoTypes", "type:note type:workflow", "type: is given twice"},
		{"SinceNotADuration", "since:lately", "since:lately is not a window"},
		{"SinceEmpty", "since:", "since: needs a window"},
		{"SinceZero", "since:0d", "not a positive window"},
		{"SinceNegative", "since:-1h", "not a positive window"},
		{"SinceBareNumber", "since:7", "is not a window"},
		{"SinceTooLong", "since:100000000d", "longer than"},
		{"SinceOverflow", "since:99999999999999999999d", "longer than"},
		{"SinceGoTooLong", "since:900000h", "longer than"},
		{"TwoSinces", "since:7d since:1d", "since: is given twice"},
		{"LimitZero", "limit:0", "from 1 to 50"},
		{"LimitTooBig", "limit:51", "from 1 to 50"},
		{"LimitNotANumber", "limit:many", "from 1 to 50"},
		{"LimitNegative", "limit:-3", "from 1 to 50"},
		{"LimitEmpty", "limit:", "from 1 to 50"},
		{"TwoLimits", "limit:3 limit:4", "limit: is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			require.ErrorIs(t, err, store.ErrInvalid)
			require.Contains(t, store.ReasonOf(err), tc.says)
		})
	}
}

func manyTags(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("tag:t")
		b.WriteString(strings.Repeat("x", i))
		b.WriteByte(' ')
	}
	return b.String()
}

func TestSetType(t *testing.T) {
	t.Parallel()
	q, err := Parse("otters")
	require.NoError(t, err)
	require.NoError(t, q.SetType(""), "no type asked leaves the default")
	require.Equal(t, TypeNote, q.Type)
	require.NoError(t, q.SetType("workflow"))
	require.Equal(t, TypeWorkflow, q.Type)

	q, err = Parse("type:note")
	require.NoError(t, err)
	require.NoError(t, q.SetType("note"), "the same type twice agrees")
	err = q.SetType("workflow")
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Contains(t, store.ReasonOf(err), "give one")
	require.ErrorIs(t, q.SetType("recipe"), store.ErrInvalid)
}

func TestParams(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, in string
		def      int
		want     store.MemoSearchParams
	}{
		{"DefaultsToNotes", "otters", DefaultLimit, store.MemoSearchParams{Query: "otters", MemoType: TypeNote, Limit: 5}},
		{"AnyTypeIsNoFilter", "type:any", 50, store.MemoSearchParams{Limit: 50}},
		{"LimitWins", "limit:7", 50, store.MemoSearchParams{MemoType: TypeNote, Limit: 7}},
		{"SinceIsACutOff", "tag:brief since:7d", DefaultLimit, store.MemoSearchParams{MemoType: TypeNote, Tags: []string{"brief"},
			UpdatedSince: now.Add(-7 * 24 * time.Hour), Limit: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, *q.Params(now, tc.def))
		})
	}
}

// FuzzParse: any input either parses or is refused as invalid input, never
// a panic or another error; a parse stays within the grammar's bounds and
// its canonical form reads back as the same query.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "otters", `"sandy banks" tag:brief`, "tag:brief since:7d", `tag:"a b" type:any limit:50`,
		"type:workflow since:1h30m", "since:99999999999999999999d", "limit:0", "tag:", `tag:"`, "\x00\xff tag:\x00",
		`a"b"c tag:x"y"`, "TAG:X Type:NOTE SINCE:2W LIMIT:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), store.ErrInvalid.Error()) || store.ReasonOf(err) == "" {
				t.Fatalf("Parse(%q): an error that is not a clear refusal: %v", s, err)
			}
			return
		}
		if q.Limit < 0 || q.Limit > MaxLimit || q.Since < 0 || q.Since > MaxSince || len(q.Tags) > store.MaxTags {
			t.Fatalf("Parse(%q) = %+v: out of bounds", s, q)
		}
		switch q.Type {
		case TypeNote, TypeWorkflow, TypeAny:
		default:
			t.Fatalf("Parse(%q): type %q", s, q.Type)
		}
		for _, tag := range q.Tags {
			if tag == "" || store.CheckName("tag", tag) != nil {
				t.Fatalf("Parse(%q): bad tag %q", s, tag)
			}
		}
		again, err := Parse(q.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", q.String(), s, err)
		}
		if q.String() != again.String() || q.Text != again.Text || q.Type != again.Type || q.Since != again.Since || q.Limit != again.Limit ||
			strings.Join(q.Tags, "\x00") != strings.Join(again.Tags, "\x00") {
			t.Fatalf("canonical form %q of %q reads back as %+v, not %+v", q.String(), s, again, q)
		}
	})
}

// TestListParams: a query someone wrote takes the grammar's default limit,
// an empty search box the listing's size, whatever type is set after.
func TestListParams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, memoType string
		want         int
	}{
		{"", "", 50},
		{"", "workflow", 50},
		{"   ", "", 50},
		{"otters", "", DefaultLimit},
		{"tag:brief", "any", DefaultLimit},
		{"otters limit:12", "", 12},
	} {
		q, err := Parse(tc.in)
		require.NoError(t, err)
		require.NoError(t, q.SetType(tc.memoType))
		require.Equal(t, tc.want, q.ListParams(time.Now(), 50).Limit, "%q %q", tc.in, tc.memoType)
	}
}
