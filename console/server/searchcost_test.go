package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// SPEC §7: no search holds a reader for more than 100 ms on a 10,000-memo
// library, and a listing made alongside searches is not held up by them.
const (
	searchBound  = 100 * time.Millisecond
	listingBound = 50 * time.Millisecond
	librarySize  = 10_000
	vocabulary   = 400
)

func word(i int) string { return fmt.Sprintf("w%d", i%vocabulary) }

// searchStack is a stack holding a 10,000-memo library whose words are
// shared widely, which is what makes searches dear: "the" is every third
// word of every memo (a hundred times each, as in English prose), w0…w31
// are in every memo (so a search of 32 terms, the most one may have,
// matches and ranks all 10,000), and each memo has 190 more words of a
// 400-word vocabulary, so common terms match thousands of memos and phrases
// of them must check positions in all of those. It also holds sessions for the listing to page.
func searchStack(t testing.TB) *stack {
	t.Helper()
	s := newStack(t)
	ctx := context.Background()
	var body strings.Builder
	for i := range librarySize {
		body.Reset()
		for j := range 32 {
			body.WriteString(word(j) + " ")
		}
		for j := range 290 {
			if j%3 == 0 {
				body.WriteString("the ")
				continue
			}
			body.WriteString(word(i*7+j*13) + " ")
			if j%30 == 29 {
				body.WriteString("\n\n")
			}
		}
		_, err := s.db.MemoCreate(ctx, &store.MemoCreateParams{Title: fmt.Sprintf("Memo %d about %s", i, word(i)), Body: body.String()})
		require.NoError(t, err)
	}
	for i := range 60 {
		_, err := s.db.SessionCreate(ctx, &store.SessionCreateParams{Title: fmt.Sprintf("session %d", i), Origin: store.OriginUser,
			Policy: store.PolicyAuto, Events: []*store.EventAppendParams{{Type: store.EventUserMessage, Payload: map[string]any{"text": "hi"}}}})
		require.NoError(t, err)
	}
	return s
}

// worstQueries are the costliest search texts we could build: repeats,
// many terms, long terms, common terms, phrases, NUL, quotes and FTS5
// operators.
func worstQueries() map[string]string {
	var common, distinct, phrases, ops []string
	for i := range 40 {
		common = append(common, word(i))
	}
	for i := range 5000 {
		distinct = append(distinct, fmt.Sprintf("%s%d", word(i), i))
	}
	for i := range 400 {
		phrases = append(phrases, fmt.Sprintf(`"%s %s %s"`, word(i%10), word(i%10+1), word(i%10+2)))
	}
	for i := range 400 {
		ops = append(ops, fmt.Sprintf(`NEAR(%s %s, 5) AND %s* ^%s OR NOT "%s \x00 {title body}: -%s + (%s`,
			word(i), word(i+1), word(i%10), word(i+2), word(i%10), word(i+3), word(i%10)))
	}
	return map[string]string{
		"RepeatedCommonTerm": strings.Repeat("w0 ", 15000),
		"TheEverywhere":      "the",
		"PhraseOfThe":        `"` + strings.Repeat("the ", 40) + `"`,
		"HyphenatedThe":      strings.Repeat("the-", 200),
		"PhrasesOfThe":       strings.Repeat(`"the the" "the w0 the" "w1 the the w2" `, 30),
		"ManyCommonTerms":    strings.Repeat(strings.Join(common, " ")+" ", 100),
		"ManyDistinctTerms":  strings.Join(distinct, " "),
		"LongTerm":           strings.Repeat("w", 100_000),
		"LongHyphenatedTerm": strings.Repeat("w0-", 330),
		"CommonPhrases":      strings.Join(phrases, " "),
		"OperatorsQuotesNUL": strings.Join(ops, " "),
		"OneCommonTerm":      "w0",
		"NULsAndQuotes":      strings.Repeat("\x00\"", 20000),
	}
}

// timeSearch answers the fastest of n runs of a store search (the time a
// reader is held): a search that costs too much exceeds the bound in every
// run, while a busy machine (the CI runs packages, browsers among them,
// side by side on two cores) slows some runs by several times; the median
// of five once read 7× the idle cost there.
func timeSearch(t testing.TB, s *stack, q string, n int) time.Duration {
	t.Helper()
	var fastest time.Duration
	for i := range n {
		start := time.Now()
		_, err := s.db.MemoSearch(context.Background(), &store.MemoSearchParams{Query: q})
		took := time.Since(start)
		require.NoError(t, err)
		if i == 0 || took < fastest {
			fastest = took
		}
	}
	return fastest
}

// listingAlongsideSearches runs nine clients searching q through the API
// without pause and, once each has had an answer, times n session
// listings; it answers their durations, sorted.
func listingAlongsideSearches(t testing.TB, s *stack, q string, n int) []time.Duration {
	t.Helper()
	path := "/api/memos?q=" + url.QueryEscape(q)
	stop := make(chan struct{})
	answered := make(chan struct{}, 9)
	errs := make(chan error, 9)
	var wg sync.WaitGroup
	for range 9 {
		wg.Go(func() {
			first := true
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := getOK(s, "viewer", path); err != nil {
					errs <- err
					return
				}
				if first {
					first = false
					answered <- struct{}{}
				}
			}
		})
	}
	for range 9 {
		select {
		case <-answered:
		case err := <-errs:
			close(stop)
			wg.Wait()
			require.NoError(t, err)
		}
	}
	var took []time.Duration
	for range n {
		start := time.Now()
		err := getOK(s, "viewer", "/api/sessions?limit=50")
		took = append(took, time.Since(start))
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	slices.Sort(took)
	return took
}

// keepAlive keeps a connection per concurrent client, so the timings are
// of requests, not of TCP handshakes (the default keeps two per host).
var keepAlive = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

// getOK GETs path with key name as; it is safe off the test goroutine
// (it reports, never fails the test).
func getOK(s *stack, as, path string) error {
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.keys[as])
	resp, err := keepAlive.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %.80s: %s", path, resp.Status)
	}
	return nil
}

// TestSearchCostIsBounded: on a 10,000-memo library the worst search text
// holds a reader under 100 ms, and a session listing made alongside nine
// such searches answers under 50 ms (bounds scaled under -race).
func TestSearchCostIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10,000-memo library")
	}
	t.Parallel()
	s := searchStack(t)
	var worstName string
	var worst time.Duration
	for name, q := range worstQueries() {
		d := timeSearch(t, s, q, 7)
		t.Logf("search %-20s %v", name, d)
		require.Less(t, d, searchBound*raceSlowdown, "search %s holds a reader too long", name)
		if d > worst {
			worst, worstName = d, name
		}
	}
	took := listingAlongsideSearches(t, s, worstQueries()[worstName], 7)
	t.Logf("worst search %s: %v; session listings alongside nine of them: %v", worstName, worst, took)
	// The median of seven listings: one unlucky scheduling slice on a busy
	// machine is not the search's doing.
	require.Less(t, took[len(took)/2], listingBound*raceSlowdown, "a listing waits on searches")
	// And none is starved: before the search cost was bounded one took 40 s.
	require.Less(t, took[len(took)-1], 5*listingBound*raceSlowdown, "a listing starves behind searches")
}

// BenchmarkSearchCost reports each worst search on a 10,000-memo library
// (ns/op is one store search, the time a reader is held), and the latency
// of a session listing made alongside nine API searches of the costliest
// text ("the", in every memo a hundred times: every memo matches and is
// ranked).
func BenchmarkSearchCost(b *testing.B) {
	s := searchStack(b)
	ctx := context.Background()
	queries := worstQueries()
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b.Run("Search/"+name, func(b *testing.B) {
			for b.Loop() {
				_, err := s.db.MemoSearch(ctx, &store.MemoSearchParams{Query: queries[name]})
				require.NoError(b, err)
			}
		})
	}
	b.Run("ListingAlongsideNineSearches", func(b *testing.B) {
		var all []time.Duration
		for b.Loop() {
			all = append(all, listingAlongsideSearches(b, s, queries["TheEverywhere"], 5)...)
		}
		slices.Sort(all)
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "listing-median-ms")
		b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "listing-max-ms")
	})
}
