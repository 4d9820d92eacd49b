// Package pgtest gives tests a fresh PostgreSQL schema of their own on the
// server HOLDFAST_TEST_POSTGRES names. Without that variable the tests skip,
// except under CI, where they fail: CI must run them (.ci/run starts a
// throwaway cluster).
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// EnvURL is the variable naming the test server.
const EnvURL = "HOLDFAST_TEST_POSTGRES"

var extOnce sync.Once

// BaseURL answers the server's URL, skipping t without one (failing it
// under CI).
func BaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set under CI: the PostgreSQL tests must run (.ci/run starts a cluster)", EnvURL)
		}
		t.Skipf("%s is not set: skipping the PostgreSQL tests", EnvURL)
	}
	return u
}

// SchemaURL creates an empty schema for t, dropped when t ends, and answers
// a URL whose connections use it (search_path). pg_trgm is created once in
// public, which stays on the path.
func SchemaURL(t testing.TB) string {
	t.Helper()
	base := BaseURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "connect to %s", EnvURL)
	defer conn.Close(ctx)
	var extErr error
	extOnce.Do(func() { _, extErr = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public`) })
	require.NoError(t, extErr)
	schema := "t_" + strings.ToLower(strings.TrimPrefix(store.NewID("s"), "s_"))
	_, err = conn.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(t, base, schema+",public")
}

// WithSearchPath answers base with its connections' search_path set.
func WithSearchPath(t testing.TB, base, path string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", path)
	u.RawQuery = q.Encode()
	return fmt.Sprint(u)
}
