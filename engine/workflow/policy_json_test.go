package workflow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPolicyJSON(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	p.Timeout, p.HoldTimeout, p.GateLabel, p.RemindAfter = 2*time.Minute, 24*time.Hour, "Review", 4*time.Hour
	b, err := json.Marshal(p)
	require.NoError(t, err)
	require.Contains(t, string(b), `"timeout":"2m0s"`, "durations read as people write them")
	require.Contains(t, string(b), `"holdTimeout":"24h0m0s"`)
	require.Contains(t, string(b), `"remindAfter":"4h0m0s"`)
	require.Contains(t, string(b), `"gateLabel":"Review"`)

	for _, tc := range []struct {
		name, in string
		want     Policy
		wantErr  bool
	}{
		{"RoundTrip", string(b), p, false},
		{"StoredNanoseconds", `{"approval":"hold","timeout":120000000000,"holdTimeout":0}`,
			Policy{Approval: "hold", Timeout: 2 * time.Minute}, false},
		{"Null", `{"timeout":null}`, Policy{}, false},
		{"Missing", `{"retries":3}`, Policy{Retries: 3}, false},
		{"BadString", `{"timeout":"soon"}`, Policy{}, true},
		{"BadType", `{"timeout":true}`, Policy{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Policy
			err := json.Unmarshal([]byte(tc.in), &got)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("InsideManifest", func(t *testing.T) {
		var m Manifest
		require.NoError(t, json.Unmarshal([]byte(`{"title":"W","policy":{"timeout":5000000000,"approvals":2}}`), &m))
		require.Equal(t, 5*time.Second, m.Policy.Timeout)
		require.Equal(t, 2, m.Policy.Approvals)
	})

	t.Run("Schedule", func(t *testing.T) {
		b, err := json.Marshal(Manifest{Schedule: &Schedule{Every: time.Hour}})
		require.NoError(t, err)
		require.Contains(t, string(b), `"schedule":{"every":"1h0m0s"}`)
		for _, in := range []string{`{"schedule":{"every":"1h0m0s"}}`, `{"schedule":{"every":3600000000000}}`} {
			var m Manifest
			require.NoError(t, json.Unmarshal([]byte(in), &m))
			require.Equal(t, &Schedule{Every: time.Hour}, m.Schedule, in)
		}
		b, err = json.Marshal(Schedule{Cron: "0 9 * * 1"})
		require.NoError(t, err)
		require.JSONEq(t, `{"cron":"0 9 * * 1"}`, string(b))
	})
}
