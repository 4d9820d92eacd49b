package storetest

import (
	"context"
	"reflect"
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
	committed := st.EventSubscribe(ctx)
	wrote := make(chan struct{}, 1)
	go func() {
		for range committed {
			select {
			case wrote <- struct{}{}:
			default: // a wake-up is already waiting
			}
		}
	}()
	Wait(t, cond, timeout, []func() <-chan struct{}{func() <-chan struct{} { return wrote }}, msgAndArgs...)
}

// Wait waits until cond holds, failing t after timeout: cond runs on the
// test goroutine, now and again whenever a channel from signals is
// readable (each is asked for its channel before cond runs, so no signal
// between the two is lost). The one wait loop of the test signals (River's):
// Until's commits, the bridge's work and fake Slack's calls, span ends.
func Wait(t testing.TB, cond func() bool, timeout time.Duration, signals []func() <-chan struct{}, msgAndArgs ...any) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	cases := make([]reflect.SelectCase, len(signals)+1)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}
	for {
		for i, s := range signals {
			cases[i+1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s())}
		}
		if cond() {
			return
		}
		if chosen, _, _ := reflect.Select(cases); chosen == 0 {
			if cond() {
				return
			}
			require.FailNow(t, "condition not met within "+timeout.String(), msgAndArgs...)
		}
	}
}
