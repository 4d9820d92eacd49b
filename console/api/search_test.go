package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
	"github.com/holdfast-bot/holdfast/store"
)

// TestMemoSearchGrammar: GET /api/memos?q= takes the query grammar of SPEC
// §4.1: each filter, their combinations, the memoType parameter as the
// query's type:, and a clear 400 for a malformed filter. The library holds
// the seeded examples, whose workflow memos name tag:brief in their source:
// they never match unless a query asks for workflows.
func TestMemoSearchGrammar(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mk := func(title, body string, tags ...string) string {
		var m store.Memo
		require.Equal(t, http.StatusCreated, b.json(t, store.RoleSteward, http.MethodPost, "/api/memos",
			map[string]any{"title": title, "body": body, "tags": tags}, &m))
		return m.ID
	}
	otters := mk("Otter brief", "Otters hold hands in sandy banks.", "brief", "otters")
	herons := mk("Heron brief", "Herons stand in the shallows.", "Brief")
	field := mk("Field notes", "Otters and herons share the estuary.", "notes")
	titles := func(q url.Values) []string {
		var out struct{ Memos []store.Memo }
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?"+q.Encode(), nil, &out))
		ids := []string{}
		for _, m := range out.Memos {
			ids = append(ids, m.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		name, q, memoType string
		want              []string // in order
	}{
		{name: "TagFiltersOnlyNewestFirst", q: "tag:brief since:7d", want: []string{herons, otters}},
		{name: "TagIsCaseInsensitive", q: "tag:BRIEF", want: []string{herons, otters}},
		{name: "TagAndWords", q: "otters tag:brief", want: []string{otters}},
		{name: "TwoTags", q: "tag:brief tag:otters", want: []string{otters}},
		{name: "Phrase", q: `"sandy banks"`, want: []string{otters}},
		{name: "PhraseOutOfOrder", q: `"banks sandy"`, want: []string{}},
		{name: "Words", q: "otters herons", want: []string{field}},
		{name: "Limit", q: "tag:brief limit:1", want: []string{herons}},
		{name: "UnknownTag", q: "tag:egrets", want: []string{}},
		{name: "LiteralTagTextIsAPhrase", q: `"tag:brief"`, want: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, titles(url.Values{"q": {tc.q}, "memoType": {tc.memoType}}))
		})
	}

	t.Run("WorkflowsOnlyWhenAsked", func(t *testing.T) {
		var notes struct{ Memos []store.Memo }
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q=brief", nil, &notes))
		require.NotEmpty(t, notes.Memos)
		for _, m := range notes.Memos {
			require.Equal(t, "note", m.MemoType, "workflow memos never match unless asked: %s", m.Title)
		}
		for _, q := range []url.Values{{"q": {"type:workflow tag brief"}}, {"q": {"tag brief"}, "memoType": {"workflow"}}} {
			var out struct{ Memos []store.Memo }
			require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?"+q.Encode(), nil, &out))
			require.NotEmpty(t, out.Memos, "the seeded workflows name tag:brief: %v", q)
			for _, m := range out.Memos {
				require.Equal(t, store.MemoTypeWorkflow, m.MemoType)
			}
		}
		var out struct{ Memos []store.Memo }
		require.Equal(t, http.StatusOK, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q=type:any+brief", nil, &out))
		types := map[string]bool{}
		for _, m := range out.Memos {
			types[m.MemoType] = true
		}
		require.Equal(t, map[string]bool{"note": true, store.MemoTypeWorkflow: true}, types)
	})

	t.Run("DefaultLimitIsFive", func(t *testing.T) {
		// The grammar's default (SPEC §4.1) serves the API's search too;
		// the listing without a query is not a search.
		var kelp []string
		for i := range 7 {
			kelp = append(kelp, mk(fmt.Sprintf("Kelp %d", i), "Kelp forests sway."))
		}
		require.Len(t, titles(url.Values{"q": {"kelp"}}), 5)
		require.ElementsMatch(t, kelp, titles(url.Values{"q": {"kelp limit:7"}}))
		require.Subset(t, titles(url.Values{}), kelp)
	})

	t.Run("MalformedIs400", func(t *testing.T) {
		for q, says := range map[string]string{
			"tag:":                    "tag: needs a tag",
			"since:lately":            "since:lately is not a window",
			"limit:99":                "limit:99 is not a whole number from 1 to 50",
			"type:recipe":             "type:recipe is not a memo type",
			"type:note type:workflow": "type: is given twice",
		} {
			var e api.ErrorBody
			require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q="+url.QueryEscape(q), nil, &e), q)
			require.Contains(t, e.Error.Message, says, q)
		}
		var e api.ErrorBody
		require.Equal(t, http.StatusBadRequest, b.json(t, store.RoleViewer, http.MethodGet, "/api/memos?q=type:note&memoType=workflow", nil, &e))
		require.Contains(t, e.Error.Message, "give one")
	})
}
