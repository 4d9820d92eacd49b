// Package testdb opens the store a test suite runs on, chosen by the
// environment, so the engine, bridge and API suites prove their behaviour on
// both stores rather than on SQLite alone (SPEC §9):
// HOLDFAST_TEST_STORE=postgres gives each test a fresh PostgreSQL schema
// (store/postgres/pgtest: skipped without HOLDFAST_TEST_POSTGRES, failed
// under CI); anything else, or nothing, a SQLite file in t.TempDir().
//
// Tests that are about SQLite itself (plan tests, file paths, kill -9 of
// a SQLite file, SQLite benchmarks) open store/sqlite directly instead.
package testdb

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

// EnvStore is the variable selecting the store: "postgres" or "sqlite"
// (the default).
const EnvStore = "HOLDFAST_TEST_STORE"

// Kind names a store implementation.
type Kind string

// The stores a suite can run on.
const (
	SQLite   Kind = "sqlite"
	Postgres Kind = "postgres"
)

// Selected answers the store the environment asks for.
func Selected() Kind {
	if os.Getenv(EnvStore) == string(Postgres) {
		return Postgres
	}
	return SQLite
}

// Options tunes the store a test opens; the zero value is each store's
// default.
type Options struct {
	// SQLiteSync is SQLite's synchronous setting ("normal" spares the
	// fsyncs a test does not need); PostgreSQL ignores it.
	SQLiteSync string
}

// DB is one fresh database that any number of handles may open, as
// replicas of the binary share one database.
type DB struct {
	kind Kind
	path string // SQLite file
	url  string // PostgreSQL URL with the test's schema on its search_path
	opts Options
}

// New creates a fresh, empty database of the selected kind for t (dropped
// or deleted when t ends). No handle is open yet: call Open.
func New(t testing.TB, opts ...Options) *DB {
	t.Helper()
	d := &DB{kind: Selected()}
	if len(opts) > 0 {
		d.opts = opts[0]
	}
	switch d.kind {
	case Postgres:
		d.url = pgtest.SchemaURL(t)
	default:
		d.path = filepath.Join(t.TempDir(), "holdfast.db")
	}
	return d
}

// Kind answers which store the database is.
func (d *DB) Kind() Kind { return d.kind }

// Open opens another handle on the database, closed when t ends (it must
// close cleanly: a store that cannot is a finding).
func (d *DB) Open(t testing.TB) store.Store {
	t.Helper()
	ctx := context.Background()
	var (
		s   store.Store
		err error
	)
	switch d.kind {
	case Postgres:
		s, err = postgres.Open(ctx, postgres.Config{URL: d.url, MaxConns: 8})
	default:
		s, err = sqlite.Open(ctx, sqlite.Config{Path: d.path, Sync: d.opts.SQLiteSync})
	}
	if err != nil {
		t.Fatalf("open the %s test store: %v", d.kind, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the %s test store: %v", d.kind, err)
		}
	})
	return s
}

// Open answers one handle on a fresh, empty database of the selected kind,
// closed when t ends.
func Open(t testing.TB, opts ...Options) store.Store {
	t.Helper()
	return New(t, opts...).Open(t)
}

// Exec runs a statement without arguments straight on the database, for a
// test that must set up a state no store method writes (a row naming a
// missing session, a clock moved back). The statement must read the same
// on both stores.
func (d *DB) Exec(t testing.TB, query string) {
	t.Helper()
	ctx := context.Background()
	switch d.kind {
	case Postgres:
		conn, err := pgx.Connect(ctx, d.url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, query); err != nil {
			t.Fatalf("exec %q: %v", query, err)
		}
	default:
		raw, err := sql.Open("sqlite3", "file:"+d.path)
		if err != nil {
			t.Fatalf("open %s: %v", d.path, err)
		}
		defer raw.Close()
		if _, err := raw.ExecContext(ctx, query); err != nil {
			t.Fatalf("exec %q: %v", query, err)
		}
	}
}

// DSN answers the database as HOLDFAST_DB names it, for a test that runs
// the real binary on it: the SQLite file's path or the PostgreSQL URL.
func (d *DB) DSN() string {
	if d.kind == Postgres {
		return d.url
	}
	return d.path
}

// SQLiteOnly skips t in the PostgreSQL pass: t is about SQLite itself (its
// files, a kill -9 beside them) and already ran in the SQLite pass.
func SQLiteOnly(t testing.TB) {
	t.Helper()
	if Selected() != SQLite {
		t.Skipf("about SQLite's files: runs when %s is unset (the SQLite pass)", EnvStore)
	}
}
