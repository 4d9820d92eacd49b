package model

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scripted is a Model that replays a fixed list of errors, then succeeds.
type scripted struct {
	errs  []error
	calls int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Complete(ctx context.Context, _ Request) (Response, error) {
	s.calls++
	if s.calls <= len(s.errs) {
		return Response{}, s.errs[s.calls-1]
	}
	return Response{Content: "ok"}, nil
}

func TestCompleteWithRetryAttempts(t *testing.T) {
	t.Parallel()
	transient := &providerError{err: errors.New("503"), transient: true, hasAfter: true} // Retry-After: 0
	permanent := errors.New("bad request")
	tests := []struct {
		name         string
		errs         []error
		retries      int
		wantAttempts int
		wantErr      error
	}{
		{name: "first try", retries: 3, wantAttempts: 1},
		{name: "recovers", errs: []error{transient, transient}, retries: 2, wantAttempts: 3},
		{name: "exhausted", errs: []error{transient, transient, transient}, retries: 2, wantAttempts: 3, wantErr: ErrTransient},
		{name: "zero retries", errs: []error{transient}, retries: 0, wantAttempts: 1, wantErr: ErrTransient},
		{name: "negative retries act as zero", errs: []error{transient}, retries: -1, wantAttempts: 1, wantErr: ErrTransient},
		{name: "permanent stops", errs: []error{transient, permanent}, retries: 5, wantAttempts: 2, wantErr: permanent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &scripted{errs: tc.errs}
			resp, n, err := CompleteWithRetry(context.Background(), m, Request{}, tc.retries, time.Microsecond)
			require.Equal(t, tc.wantAttempts, n)
			require.Equal(t, tc.wantAttempts, m.calls)
			if tc.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, "ok", resp.Content)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
		})
	}
}

func TestCompleteWithRetryCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := &scripted{}
	_, n, err := CompleteWithRetry(ctx, m, Request{}, 3, time.Millisecond)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
	require.Zero(t, m.calls)
}

func TestRetryWait(t *testing.T) {
	t.Parallel()
	plain := &providerError{err: errors.New("x"), transient: true}
	tests := []struct {
		name     string
		err      error
		attempt  int
		base     time.Duration
		min, max time.Duration
	}{
		{name: "first backoff", err: plain, attempt: 1, base: 100 * time.Millisecond, min: 50 * time.Millisecond, max: 100 * time.Millisecond},
		{name: "doubles", err: plain, attempt: 3, base: 100 * time.Millisecond, min: 200 * time.Millisecond, max: 400 * time.Millisecond},
		{name: "capped", err: plain, attempt: 30, base: time.Second, min: 5 * time.Second, max: 10 * time.Second},
		{name: "zero base", err: plain, attempt: 2, base: 0, min: 0, max: 0},
		{name: "retry-after wins", err: &providerError{retryAfter: 3 * time.Second, hasAfter: true}, attempt: 1, base: time.Millisecond, min: 3 * time.Second, max: 3 * time.Second},
		{name: "retry-after capped", err: &providerError{retryAfter: time.Hour, hasAfter: true}, attempt: 1, base: time.Millisecond, min: 10 * time.Second, max: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 50 {
				d := retryWait(tc.err, tc.attempt, tc.base)
				require.GreaterOrEqual(t, d, tc.min)
				require.LessOrEqual(t, d, tc.max)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{name: "absent"},
		{name: "zero", header: map[string]string{"Retry-After": "0"}, ok: true},
		{name: "seconds", header: map[string]string{"Retry-After": "7"}, want: 7 * time.Second, ok: true},
		{name: "fractional", header: map[string]string{"Retry-After": "1.5"}, want: 1500 * time.Millisecond, ok: true},
		{name: "milliseconds preferred", header: map[string]string{"Retry-After": "7", "Retry-After-Ms": "250"}, want: 250 * time.Millisecond, ok: true},
		{name: "http date", header: map[string]string{"Retry-After": now.Add(4 * time.Second).Format(http.TimeFormat)}, want: 4 * time.Second, ok: true},
		{name: "date in the past", header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, ok: true},
		{name: "garbage", header: map[string]string{"Retry-After": "soon"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			got, ok := parseRetryAfter(h, now)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}
