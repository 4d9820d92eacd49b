package workflow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScheduleNextPrev(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		s          *Schedule
		at         string
		next, prev string
	}{
		// 1970-01-01 was a Thursday, so 168h slots fall on Thursdays 00:00Z.
		{"every week", &Schedule{Every: 168 * time.Hour}, "2026-03-04T12:00:00Z", "2026-03-05T00:00:00Z", "2026-02-26T00:00:00Z"},
		{"every on slot", &Schedule{Every: time.Hour}, "2026-03-04T12:00:00Z", "2026-03-04T13:00:00Z", "2026-03-04T12:00:00Z"},
		{"every 15m", &Schedule{Every: 15 * time.Minute}, "2026-03-04T12:07:30Z", "2026-03-04T12:15:00Z", "2026-03-04T12:00:00Z"},
		{"every before epoch", &Schedule{Every: time.Hour}, "1969-12-31T22:30:00Z", "1969-12-31T23:00:00Z", "1969-12-31T22:00:00Z"},
		{"every non-UTC input", &Schedule{Every: time.Hour}, "2026-03-04T12:30:00+02:00", "2026-03-04T11:00:00Z", "2026-03-04T10:00:00Z"},
		{"cron monday 9", &Schedule{Cron: "0 9 * * 1"}, "2026-03-04T12:00:00Z", "2026-03-09T09:00:00Z", "2026-03-02T09:00:00Z"},
		{"cron on slot", &Schedule{Cron: "0 9 * * 1"}, "2026-03-02T09:00:00Z", "2026-03-09T09:00:00Z", "2026-03-02T09:00:00Z"},
		{"cron every minute", &Schedule{Cron: "* * * * *"}, "2026-03-04T12:00:30Z", "2026-03-04T12:01:00Z", "2026-03-04T12:00:00Z"},
		{"cron yearly", &Schedule{Cron: "0 0 1 1 *"}, "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"cron leap day", &Schedule{Cron: "0 0 29 2 *"}, "2027-06-01T00:00:00Z", "2028-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"cron burst", &Schedule{Cron: "* 9 1 * *"}, "2026-03-20T00:00:00Z", "2026-04-01T09:00:00Z", "2026-03-01T09:59:00Z"},
		{"descriptor", &Schedule{Cron: "@daily"}, "2026-03-04T12:00:00Z", "2026-03-05T00:00:00Z", "2026-03-04T00:00:00Z"},
		{"bad cron", &Schedule{Cron: "nope"}, "2026-03-04T12:00:00Z", "", ""},
		{"never fires", &Schedule{Cron: "0 0 30 2 *"}, "2026-03-04T12:00:00Z", "", ""},
		{"empty", &Schedule{}, "2026-03-04T12:00:00Z", "", ""},
		{"nil", nil, "2026-03-04T12:00:00Z", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at := utc(tc.at)
			next, prev := tc.s.Next(at), tc.s.Prev(at)
			if tc.next == "" {
				require.True(t, next.IsZero(), next)
				require.True(t, prev.IsZero(), prev)
				return
			}
			require.Equal(t, utc(tc.next), next)
			require.Equal(t, time.UTC, next.Location())
			require.Equal(t, utc(tc.prev), prev)
			require.Equal(t, time.UTC, prev.Location())
			require.True(t, next.After(at))
			require.False(t, prev.After(at))
			// Prev of a slot is that slot; Next of Prev is the slot after it.
			require.Equal(t, prev, tc.s.Prev(prev))
			require.True(t, tc.s.Next(prev).After(prev))
		})
	}
}

func TestInvokeScheduleRoundTrip(t *testing.T) {
	t.Parallel()
	for _, inv := range []string{"every 168h", "0 9 * * 1", "*/5 * * * *", "@hourly"} {
		s, err := parseInvoke(inv)
		require.NoError(t, err, inv)
		require.NotNil(t, s, inv)
		at := utc("2026-01-15T10:02:00Z")
		require.False(t, s.Next(at).IsZero(), inv)
		require.False(t, s.Prev(at).IsZero(), inv)
	}
}

func BenchmarkSchedulePrevCron(b *testing.B) {
	s := &Schedule{Cron: "0 9 * * 1"}
	at := utc("2026-03-04T12:00:00Z")
	for b.Loop() {
		s.Prev(at)
	}
}
