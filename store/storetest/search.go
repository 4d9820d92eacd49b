package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runSearch covers search text: any text is valid input (SPEC §7), never a
// syntax error of the store's query dialect, and its cost is bounded.
func runSearch(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("MemoSearchRanksTheNewestMatches", func(t *testing.T) {
		// A search matching more than store.MaxRankedMatches memos ranks
		// the newest of those its filters keep: a filter keeping only
		// older memos still finds them, and the best match among the
		// newest ranks first.
		t.Parallel()
		s := newStore(t)
		var old []string
		for i := range store.MaxRankedMatches + 200 {
			p := &store.MemoCreateParams{Title: fmt.Sprintf("Memo %d", i), Body: "otters and kelp"}
			switch {
			case i < 10: // the oldest, the only ones tagged, and matching best but for the title
				p.Tags, p.Body = []string{"old"}, "otters, otters, otters and kelp"
			case i == store.MaxRankedMatches+100:
				p.Title = "Otters" // the best match, among the newest
			}
			m, err := s.MemoCreate(ctx, p)
			require.NoError(t, err)
			if i < 10 {
				old = append(old, m.ID)
			}
		}
		ids := func(ms []*store.Memo) []string {
			out := make([]string, len(ms))
			for i, m := range ms {
				out[i] = m.ID
			}
			return out
		}
		found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters", Tags: []string{"old"}, Limit: 50})
		require.NoError(t, err)
		require.ElementsMatch(t, old, ids(found), "the filter is applied before the newest are taken")
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: "otters", Limit: 50})
		require.NoError(t, err)
		require.Len(t, found, 50)
		require.Equal(t, "Otters", found[0].Title)
		for _, id := range ids(found) {
			require.NotContains(t, old, id, "older than the newest %d matches", store.MaxRankedMatches)
		}
	})

	t.Run("MemoSearchAnyTextIsValid", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Kingfisher notes", Body: "Kingfishers nest in sandy banks near rivers."})
		require.NoError(t, err)
		for _, tc := range []struct {
			name, q string
			found   bool
		}{
			{"NUL", "\x00", true},
			{"NULInsideATerm", "king\x00fisher", true},
			{"NULBesideATerm", "kingfishers \x00", true},
			{"ControlCharacters", "\x01\x02\t\x7fkingfishers\x1b", true},
			{"InvalidUTF8", "\xff\xfe kingfishers", true},
			{"LoneQuote", `"`, true},
			{"UnbalancedPhrase", `"sandy banks`, true},
			{"Phrase", `"sandy banks"`, true},
			{"PhraseOutOfOrder", `"banks sandy"`, false},
			{"PhrasePastThePhraseBudgetIsItsWords", `"rivers near banks sandy in nest kingfishers notes kingfisher"`, true},
			{"HyphenatedWordIsAPhrase", "sandy-banks", true},
			{"HyphenatedWordOutOfOrder", "banks-sandy", false},
			{"NearOperator", "NEAR(kingfishers rivers)", false},
			{"NearWords", "NEAR rivers", true},
			{"OperatorsAreWords", "kingfishers AND OR NOT", false},
			{"LeadingNot", "NOT kingfishers", false},
			{"Star", "*", false},
			{"Prefix", "king*", false},
			{"Caret", "^kingfishers", true},
			{"ColumnFilter", "title:kingfisher", false},
			{"Braces", "{title body}: kingfishers", false},
			{"Parens", "((((kingfishers", true},
			{"Plus", "kingfishers + rivers", true},
			{"EscapedQuotes", `""""kingfishers""""`, true},
			{"Backslashes", `\\\ kingfishers \"`, true},
			{"OnlyPunctuation", `-+*^:"(){}[],.;`, false},
			{"Emoji", "🐦 kingfishers", true},
			{"OnlyEmoji", "🦫", false},
			{"RepeatedTerms", strings.Repeat("kingfishers ", 15000), true},
			{"ManyDistinctTerms", "kingfishers " + manyTerms(5000), false},
			{"LongTerm", strings.Repeat("k", 900), false},
			{"TermCutByTheCapIsSearchedAsCut", strings.Repeat("k", 100000), false},
			{"TermCutByTheCapBeforeAMatch", strings.Repeat("k", 1500) + " kingfishers", false},
			{"LongHyphenatedTerm", strings.Repeat("a-", 450) + " ", false},
			{"ManyPhrases", strings.Repeat(`"sandy banks" `, 1000), true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: tc.q})
				require.NoError(t, err, "any search text is valid input")
				if tc.found {
					// Text that says nothing (no term) lists the library; text
					// that names kingfishers finds the memo. Terms with no word
					// in them find nothing.
					require.Len(t, found, 1)
					require.Equal(t, m.ID, found[0].ID)
				} else {
					require.Empty(t, found)
				}
			})
		}
	})

	t.Run("MemoSearchFilters", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mk := func(title, body, memoType string, unlisted bool, tags ...string) *store.Memo {
			p := &store.MemoCreateParams{Title: title, Body: body, MemoType: memoType, Tags: tags, Unlisted: unlisted}
			if memoType == store.MemoTypeWorkflow {
				p.Workflow = &store.WorkflowIndex{Command: "/" + strings.ToLower(title), Status: "draft"}
			}
			m, err := s.MemoCreate(ctx, p)
			require.NoError(t, err)
			return m
		}
		old := mk("Old brief", "otters in the estuary", "", false, "Brief")
		cut := old.UpdatedAt.Add(time.Microsecond)
		otters := mk("Otter brief", "otters at dawn", "", false, "brief", "otters")
		heron := mk("Heron brief", "herons wade", "", false, "BRIEF")
		mk("Digest", "the brief digest mentions tag:brief", store.MemoTypeWorkflow, false, "brief")
		hidden := mk("Hidden brief", "otters unlisted", "", true, "brief")
		mk("Briefs", "not the tag", "", false, "briefs")
		ids := func(ms []*store.Memo) []string {
			out := []string{}
			for _, m := range ms {
				out = append(out, m.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			p    store.MemoSearchParams
			want []*store.Memo
		}{
			{"TagNewestFirstAnyCase", store.MemoSearchParams{Tags: []string{"brief"}, MemoType: "note"}, []*store.Memo{heron, otters, old}},
			{"TagSince", store.MemoSearchParams{Tags: []string{"Brief"}, MemoType: "note", UpdatedSince: cut}, []*store.Memo{heron, otters}},
			{"TwoTags", store.MemoSearchParams{Tags: []string{"brief", "OTTERS"}, MemoType: "note"}, []*store.Memo{otters}},
			{"TagAndText", store.MemoSearchParams{Query: "otters", Tags: []string{"brief"}, MemoType: "note"}, nil},
			{"TagUnlistedWhenAsked", store.MemoSearchParams{Tags: []string{"brief"}, MemoType: "note", IncludeUnlisted: true, Limit: 1}, []*store.Memo{hidden}},
			{"Limit", store.MemoSearchParams{Tags: []string{"brief"}, MemoType: "note", Limit: 2}, []*store.Memo{heron, otters}},
			{"SinceWithoutTag", store.MemoSearchParams{MemoType: "note", UpdatedSince: heron.UpdatedAt}, nil},
			{"NoMatchingTag", store.MemoSearchParams{Tags: []string{"egrets"}}, []*store.Memo{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.MemoSearch(ctx, &tc.p)
				require.NoError(t, err)
				switch tc.name {
				case "TagAndText":
					require.ElementsMatch(t, []string{otters.ID, old.ID}, ids(got), "text ranks, the filters keep")
				case "SinceWithoutTag":
					require.Equal(t, heron.ID, ids(got)[len(got)-1], "the cut-off is inclusive")
					require.NotContains(t, ids(got), otters.ID)
				default:
					require.Equal(t, ids(tc.want), ids(got))
				}
			})
		}
		wfs, err := s.MemoSearch(ctx, &store.MemoSearchParams{Tags: []string{"brief"}, MemoType: store.MemoTypeWorkflow})
		require.NoError(t, err)
		require.Len(t, wfs, 1, "a workflow memo carrying the tag matches only when workflows are asked for")

		// The tag filter follows updates: new tags, and a fresh update time.
		tags := []string{"otters"}
		_, err = s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: heron.ID, ExpectedVersion: heron.ContentVersion, Tags: &tags})
		require.NoError(t, err)
		got, err := s.MemoSearch(ctx, &store.MemoSearchParams{Tags: []string{"brief"}, MemoType: "note"})
		require.NoError(t, err)
		require.Equal(t, []string{otters.ID, old.ID}, ids(got), "a removed tag no longer matches")
		body := "otters again"
		up, err := s.MemoUpdate(ctx, &store.MemoUpdateParams{ID: old.ID, ExpectedVersion: old.ContentVersion, Body: &body})
		require.NoError(t, err)
		got, err = s.MemoSearch(ctx, &store.MemoSearchParams{Tags: []string{"brief"}, MemoType: "note", UpdatedSince: up.UpdatedAt})
		require.NoError(t, err)
		require.Equal(t, []string{old.ID}, ids(got), "an update moves a memo into the window")
	})

	t.Run("MemoSearchTermsAreCapped", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		m, err := s.MemoCreate(ctx, &store.MemoCreateParams{Title: "Capped", Body: "alpha " + manyTerms(store.MaxSearchTerms)})
		require.NoError(t, err)
		// The first MaxSearchTerms distinct terms are searched; later ones,
		// which no memo holds, are ignored.
		q := strings.Repeat("alpha ", 100) + manyTerms(store.MaxSearchTerms-1) + " absent1 absent2"
		found, err := s.MemoSearch(ctx, &store.MemoSearchParams{Query: q})
		require.NoError(t, err)
		require.Len(t, found, 1, "repeats count once; terms past the cap are ignored")
		require.Equal(t, m.ID, found[0].ID)
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: "absent1 " + q})
		require.NoError(t, err)
		require.Empty(t, found, "a term within the cap must match")
		// Text past MaxSearchChars characters is ignored.
		found, err = s.MemoSearch(ctx, &store.MemoSearchParams{Query: "alpha" + strings.Repeat(" ", store.MaxSearchChars) + "absent1"})
		require.NoError(t, err)
		require.Len(t, found, 1)
	})

	t.Run("SessionListAnyTextIsValid", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ses, err := s.SessionCreate(ctx, &store.SessionCreateParams{Title: "Weekly digest loop", Origin: store.OriginUser, Policy: store.PolicyAuto,
			Events: []*store.EventAppendParams{{Type: store.EventUserMessage}}})
		require.NoError(t, err)
		for _, q := range []string{"\x00", "dig\x00est", "\xff", `"`, "NEAR(a b)", "*", "^", strings.Repeat("digest ", 15000),
			strings.Repeat("d", 100000)} {
			_, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, Query: q, Limit: 10})
			require.NoError(t, err, "any search text is valid input: %q", truncateForMessage(q))
		}
		got, err := s.SessionList(ctx, &store.SessionListParams{Origins: []string{store.OriginUser}, Query: "digest\x00", Limit: 10})
		require.NoError(t, err)
		require.Len(t, got, 1, "control characters are dropped from the filter")
		require.Equal(t, ses.ID, got[0].ID)
	})
}

// manyTerms is n distinct words t0 … t(n-1).
func manyTerms(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("t")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(itoa(i))
	}
	return b.String()
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func truncateForMessage(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
