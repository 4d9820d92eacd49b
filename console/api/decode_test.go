package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/console/api"
)

// TestDecodeSaysWhatIsWrong: a JSON body the API cannot take is 400 with a
// sentence about the request, in its own field names, never Go's types.
func TestDecodeSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	type memo struct {
		Title string         `json:"title"`
		Tags  []string       `json:"tags"`
		Count *int           `json:"count"`
		Meta  map[string]any `json:"meta"`
		Inner struct {
			On bool `json:"on"`
		} `json:"inner"`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"String", `{"title":7}`, "title: expected a string, got a number"},
		{"List", `{"tags":"a"}`, "tags: expected a list, got a string"},
		{"ListItem", `{"tags":["a",1]}`, "tags: expected a string, got a number"},
		{"Number", `{"count":"3"}`, "count: expected a number, got a string"},
		{"Object", `{"meta":[1]}`, "meta: expected an object, got a list"},
		{"Nested", `{"inner":{"on":"yes"}}`, "inner.on: expected true or false, got a string"},
		{"NotAnObject", `[]`, "the request body must be a JSON object, not a list"},
		{"Unknown", `{"author":"me"}`, `unknown field "author"`},
		{"Miscased", `{"Title":"t"}`, `unknown field "Title"; field names are case-sensitive: "title"`},
		{"Empty", ``, "the request body is empty; send a JSON object"},
		{"Truncated", `{"title":`, "malformed JSON: the body ends before the JSON does"},
		{"Syntax", `{"title" "x"}`, "malformed JSON at byte 10: invalid character"},
		{"LoneSurrogate", `{"title":"\ud800"}`, `the request body holds a lone UTF-16 surrogate (\ud800), which is no character`},
		{"LowSurrogateFirst", `{"title":"\udc00\ud800"}`, `lone UTF-16 surrogate (\udc00)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/api/memos", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			var v memo
			require.False(t, api.Decode(w, r, &v))
			require.Equal(t, http.StatusBadRequest, w.Code)
			var got struct{ Error struct{ Message string } }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
			require.Contains(t, got.Error.Message, tc.want)
			require.NotContains(t, got.Error.Message, "Go ")
			require.NotContains(t, got.Error.Message, "json: ")
		})
	}
	// A surrogate pair is one character, and is taken.
	r := httptest.NewRequest(http.MethodPost, "/api/memos", strings.NewReader(`{"title":"\ud83e\udd9c"}`))
	r.Header.Set("Content-Type", "application/json")
	var v memo
	require.True(t, api.Decode(httptest.NewRecorder(), r, &v))
	require.Equal(t, "🦜", v.Title)
}

// FuzzDecode: no body makes Decode panic, and a body it takes holds no NUL
// and no character encoding/json made up (U+FFFD) that the body did not
// spell.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"title":"\ud83e\udd9c"}`, `{"title":"\ud800"}`, `{"a":"\\u0000"}`, `{"a":"\u0000"}`, `{"a":["\udc00\ud800"]}`, `{"a":"\ufffd"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/api/x", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var v any
		if !api.Decode(httptest.NewRecorder(), r, &v) {
			return
		}
		spelled := strings.ContainsRune(body, '\ufffd') || strings.Contains(strings.ToLower(body), `\ufffd`)
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				require.NotContains(t, v, "\x00", body)
				require.True(t, spelled || !strings.ContainsRune(v, '\ufffd'), "U+FFFD the body did not spell: %q", body)
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}
