package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeManifestShowsStoredDurationsAsStrings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"StoredNanoseconds", `{"title":"W","policy":{"timeout":120000000000,"holdTimeout":0}}`, `"timeout":"2m0s"`},
		{"AlreadyStrings", `{"title":"W","policy":{"timeout":"2m0s"}}`, `"timeout":"2m0s"`},
		{"Unreadable", `{"title":1}`, `{"title":1}`},
		{"Null", `null`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, string(normalizeManifest(json.RawMessage(tc.in))), tc.want)
		})
	}
}
