package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runLease covers the named leases the replicas' leader holds (SPEC §9).
// Times are the caller's, so the cases pass explicit instants.
func runLease(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second

	t.Run("LeaseAcquireRenewRefuseTakeOverRelease", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.LeaseGet(ctx, "leader")
		require.ErrorIs(t, err, store.ErrNotFound, "a lease never taken")

		held, err := s.LeaseAcquire(ctx, "leader", "a", t0, ttl)
		require.NoError(t, err)
		require.True(t, held, "a free lease is taken")
		l, err := s.LeaseGet(ctx, "leader")
		require.NoError(t, err)
		require.Equal(t, store.Lease{Name: "leader", Holder: "a", AcquiredAt: t0, ExpiresAt: t0.Add(ttl)}, *l)

		held, err = s.LeaseAcquire(ctx, "leader", "b", t0.Add(ttl-time.Millisecond), ttl)
		require.NoError(t, err)
		require.False(t, held, "another holder's unexpired lease is refused")

		held, err = s.LeaseAcquire(ctx, "leader", "a", t0.Add(5*time.Second), ttl)
		require.NoError(t, err)
		require.True(t, held, "the holder renews")
		l, err = s.LeaseGet(ctx, "leader")
		require.NoError(t, err)
		require.Equal(t, "a", l.Holder)
		require.Equal(t, t0, l.AcquiredAt, "a renewal keeps when the lease was taken")
		require.Equal(t, t0.Add(5*time.Second+ttl), l.ExpiresAt, "a renewal moves the expiry")

		held, err = s.LeaseAcquire(ctx, "leader", "b", t0.Add(ttl), ttl)
		require.NoError(t, err)
		require.False(t, held, "the renewed lease outlives the first expiry")

		late := t0.Add(5*time.Second + ttl)
		held, err = s.LeaseAcquire(ctx, "leader", "b", late, ttl)
		require.NoError(t, err)
		require.True(t, held, "an expired lease is taken over")
		l, err = s.LeaseGet(ctx, "leader")
		require.NoError(t, err)
		require.Equal(t, store.Lease{Name: "leader", Holder: "b", AcquiredAt: late, ExpiresAt: late.Add(ttl)}, *l)

		held, err = s.LeaseAcquire(ctx, "leader", "a", late.Add(time.Second), ttl)
		require.NoError(t, err)
		require.False(t, held, "the old holder cannot renew a lease taken over")

		require.NoError(t, s.LeaseRelease(ctx, "leader", "a"), "releasing a lease one does not hold is harmless")
		l, err = s.LeaseGet(ctx, "leader")
		require.NoError(t, err)
		require.Equal(t, "b", l.Holder, "and changes nothing")

		require.NoError(t, s.LeaseRelease(ctx, "leader", "b"))
		_, err = s.LeaseGet(ctx, "leader")
		require.ErrorIs(t, err, store.ErrNotFound)
		held, err = s.LeaseAcquire(ctx, "leader", "a", late.Add(time.Second), ttl)
		require.NoError(t, err)
		require.True(t, held, "a released lease is taken at once, long before its expiry")

		held, err = s.LeaseAcquire(ctx, "other", "b", late.Add(time.Second), ttl)
		require.NoError(t, err)
		require.True(t, held, "leases are independent by name")

		_, err = s.LeaseAcquire(ctx, "leader", "", t0, ttl)
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = s.LeaseAcquire(ctx, "leader", "a", t0, 0)
		require.ErrorIs(t, err, store.ErrInvalid)
	})

	// Campaigners meeting on a free or expired lease: exactly one wins.
	t.Run("LeaseAcquireConcurrently", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for round, at := range []time.Time{t0, t0.Add(ttl), t0.Add(2 * ttl)} {
			const n = 8
			var wg sync.WaitGroup
			held := make([]bool, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					held[i], errs[i] = s.LeaseAcquire(ctx, "leader", fmt.Sprintf("r%d-%d", round, i), at, ttl)
				})
			}
			wg.Wait()
			winners := 0
			for i := range n {
				require.NoError(t, errs[i])
				if held[i] {
					winners++
				}
			}
			require.Equal(t, 1, winners, "round %d: one campaigner takes the lease", round)
		}
	})

	// Pruning deletes the lapsed leases of one kind only, and only those
	// that expired before the cut.
	t.Run("LeasePrune", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, l := range []struct {
			name string
			at   time.Time
		}{
			{"runner:gone", t0},
			{"runner:lapsed-lately", t0.Add(time.Hour)},
			{"runner:alive", t0.Add(2 * time.Hour)},
			{"leader", t0},
			{"runner", t0},
		} {
			held, err := s.LeaseAcquire(ctx, l.name, "h", l.at, ttl)
			require.NoError(t, err)
			require.True(t, held)
		}
		n, err := s.LeasePrune(ctx, "runner:", t0.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		_, err = s.LeaseGet(ctx, "runner:gone")
		require.ErrorIs(t, err, store.ErrNotFound)
		for _, kept := range []string{"runner:lapsed-lately", "runner:alive", "leader", "runner"} {
			_, err := s.LeaseGet(ctx, kept)
			require.NoError(t, err, kept)
		}
		n, err = s.LeasePrune(ctx, "runner:", t0.Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "nothing left to prune")
	})

	// A release wakes the other processes sharing the store, so a follower
	// takes over at once on a clean shutdown.
	t.Run("LeaseReleaseNotifies", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		notices := s.WorkSubscribe(subCtx)
		held, err := s.LeaseAcquire(ctx, "leader", "a", t0, ttl)
		require.NoError(t, err)
		require.True(t, held)
		require.NoError(t, s.LeaseRelease(ctx, "leader", "a"))
		deadline := time.After(5 * time.Second)
		for {
			select {
			case w := <-notices:
				if w.Kind == store.WorkLeaseFree {
					require.Equal(t, "leader", w.Reason)
					return
				}
			case <-deadline:
				t.Fatal("no lease_free notice after a release")
			}
		}
	})
}
