package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// runConsole covers console sign-in sessions and role changes.
func runConsole(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("ConsoleSessions", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		u, err := s.UserCreate(ctx, &store.User{Username: "ada", PasswordHash: "x", Role: store.RoleViewer})
		require.NoError(t, err)

		cs, err := s.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: "cs1", SecretHash: "h", UserID: u.ID, CSRFToken: "tok",
			UserAgent: "ua", IP: "127.0.0.1", ExpiresAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, "ada", cs.User.Username)
		require.Equal(t, "tok", cs.CSRFToken)

		_, err = s.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: "cs1", SecretHash: "h", UserID: u.ID, CSRFToken: "t", ExpiresAt: time.Now().Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = s.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: "cs2", UserID: u.ID})
		require.Error(t, err, "secret hash, token and expiry are required")

		_, err = s.UserRoleSet(ctx, u.ID, store.RoleSteward)
		require.NoError(t, err)
		got, err := s.ConsoleSessionGetByID(ctx, "cs1")
		require.NoError(t, err)
		require.Equal(t, store.RoleSteward, got.User.Role, "a role change applies to signed-in sessions at once")
		_, err = s.UserRoleSet(ctx, u.ID, "root")
		require.Error(t, err)
		_, err = s.UserRoleSet(ctx, "usr_missing", store.RoleAdmin)
		require.ErrorIs(t, err, store.ErrNotFound)

		_, err = s.ConsoleSessionCreate(ctx, &store.ConsoleSession{ID: "old", SecretHash: "h", UserID: u.ID, CSRFToken: "t", ExpiresAt: time.Now().Add(-time.Second)})
		require.NoError(t, err)
		_, err = s.ConsoleSessionGetByID(ctx, "old")
		require.ErrorIs(t, err, store.ErrNotFound, "an expired session does not authenticate")
		n, err := s.ConsoleSessionDeleteExpired(ctx, time.Now())
		require.NoError(t, err)
		require.Equal(t, 1, n)

		require.NoError(t, s.ConsoleSessionDelete(ctx, "cs1"))
		require.NoError(t, s.ConsoleSessionDelete(ctx, "cs1"), "signing out twice is harmless")
		_, err = s.ConsoleSessionGetByID(ctx, "cs1")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SignInFailures", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const window = 15 * time.Minute
		t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
		add := func(at time.Time, keys ...string) {
			t.Helper()
			require.NoError(t, s.SignInFailureAddMany(ctx, &store.SignInFailureAddManyParams{Keys: keys, Now: at, Since: at.Add(-window)}))
		}
		list := func(at time.Time, keys ...string) map[string]*store.SignInFailure {
			t.Helper()
			fs, err := s.SignInFailureList(ctx, &store.SignInFailureListParams{Keys: keys, Since: at.Add(-window)})
			require.NoError(t, err)
			out := map[string]*store.SignInFailure{}
			for _, f := range fs {
				out[f.Key] = f
			}
			return out
		}
		for i := range 3 {
			add(t0.Add(time.Duration(i)*time.Minute), "ua:ada|1.2.3.4", "u:ada")
		}
		add(t0.Add(5*time.Minute), "u:ada")
		got := list(t0.Add(6*time.Minute), "ua:ada|1.2.3.4", "u:ada", "u:bob")
		require.Len(t, got, 2, "keys with no count are absent")
		require.Equal(t, 3, got["ua:ada|1.2.3.4"].Failures)
		require.Equal(t, 4, got["u:ada"].Failures)
		require.True(t, got["u:ada"].WindowStart.Equal(t0), "the window starts at its first failure")

		require.Empty(t, list(t0.Add(window), "u:ada"), "a window that is over counts nothing")
		add(t0.Add(window+time.Minute), "u:ada")
		got = list(t0.Add(window+time.Minute), "u:ada", "ua:ada|1.2.3.4")
		require.Equal(t, 1, got["u:ada"].Failures, "a failure after the window starts a new one")
		require.True(t, got["u:ada"].WindowStart.Equal(t0.Add(window+time.Minute)))
		require.NotContains(t, got, "ua:ada|1.2.3.4", "windows that are over are pruned")

		require.NoError(t, s.SignInFailureDeleteMany(ctx, []string{"u:ada", "u:missing"}))
		require.Empty(t, list(t0.Add(window+time.Minute), "u:ada"))
		require.NoError(t, s.SignInFailureDeleteMany(ctx, nil))
		fs, err := s.SignInFailureList(ctx, &store.SignInFailureListParams{Since: t0})
		require.NoError(t, err)
		require.Empty(t, fs)
	})
}
