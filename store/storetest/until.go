package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// Until waits until cond holds, failing t after timeout. cond runs on the
// test goroutine, now and again after every transcript commit st reports
// (EventSubscribe): a test waits on the writes it expects — a reply, a
// settled run — instead of polling the store on an interval.
func Until(t testing.TB, st store.Store, cond func() bool, timeout time.Duration, msgAndArgs ...any) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wrote := make(chan struct{}, 1)
	st.EventSubscribe(ctx, func(int64) {
		select {
		case wrote <- struct{}{}:
		default: // a wake-up is already waiting
		}
	})
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-wrote:
		case <-deadline.C:
			if cond() {
				return
			}
			require.FailNow(t, "condition not met within "+timeout.String(), msgAndArgs...)
		}
	}
}
