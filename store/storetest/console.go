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
}
