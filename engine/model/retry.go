package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// maxRetryWait caps any single wait, including a server's Retry-After, so a
// misbehaving endpoint cannot park a run for minutes while it holds a worker.
const maxRetryWait = 10 * time.Second

// CompleteWithRetry retries only transient errors, up to retries extra
// attempts, with exponential backoff plus jitter from base. A Retry-After from
// the provider replaces the computed wait, capped at 10s. It stops as soon as
// ctx is done. The attempt count is returned so the engine can record it.
func CompleteWithRetry(ctx context.Context, m Model, req Request, retries int, base time.Duration) (Response, int, error) {
	retries = max(retries, 0)
	attempts := 0
	for {
		if err := ctx.Err(); err != nil {
			return Response{}, attempts, fmt.Errorf("model %s: stopped after %d attempts: %w", m.Name(), attempts, err)
		}
		attempts++
		resp, err := m.Complete(ctx, req)
		if err == nil {
			return resp, attempts, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (last error: %v)", ctxErr, err)
		}
		if !IsTransient(err) || ctx.Err() != nil {
			return Response{}, attempts, err
		}
		if attempts > retries {
			return Response{}, attempts, fmt.Errorf("model %s: giving up after %d attempts: %w", m.Name(), attempts, err)
		}
		t := time.NewTimer(retryWait(err, attempts, base))
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, attempts, fmt.Errorf("model %s: stopped after %d attempts: %w (last error: %v)", m.Name(), attempts, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// retryWait is the delay before attempt n+1. Jitter spreads out workers that
// failed together so they do not hammer a recovering provider in lockstep.
func retryWait(err error, attempt int, base time.Duration) time.Duration {
	var ra interface{ RetryAfter() (time.Duration, bool) }
	if errors.As(err, &ra) {
		if d, ok := ra.RetryAfter(); ok {
			return min(max(d, 0), maxRetryWait)
		}
	}
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < maxRetryWait; i++ {
		d *= 2
	}
	d = min(d, maxRetryWait)
	// Equal jitter: at least half the backoff, so retries still back off.
	return d/2 + rand.N(d/2+1)
}
