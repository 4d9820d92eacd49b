// Package sqlite is the SQLite implementation of store.Store. It holds all of
// Holdfast's SQL.
//
// Writes go through a single connection opened with BEGIN IMMEDIATE: SQLite
// admits one writer at a time anyway, and funnelling writers through one Go
// connection means they queue in database/sql instead of failing with
// SQLITE_BUSY or deadlocking on a read-to-write lock upgrade. Reads use a
// separate pool and run concurrently under WAL.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/holdfast-bot/holdfast/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// timeFormat has fixed width so that stored times sort as text.
const timeFormat = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(s string) time.Time {
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		t, _ = time.Parse(time.RFC3339Nano, s)
	}
	return t.UTC()
}

// Config opens a database.
type Config struct {
	Path string
	// Sync is SQLite's synchronous setting: "full" (default) or "normal".
	Sync string
	// ReadConns bounds the read pool (default 8).
	ReadConns int
}

// DB is the SQLite store.
type DB struct {
	w *sql.DB // one connection: every write transaction
	r *sql.DB // read pool
	// searches holds a slot per text search in flight (memo full-text
	// search, session text filter): at most half the read pool, so however
	// many searches arrive at once, every other read finds a connection.
	searches chan struct{}

	writes    chan *writeReq
	stop      chan struct{}
	writerWG  sync.WaitGroup
	closeOnce sync.Once

	events eventNotifier // EventSubscribe's
	work   workNotifier  // WorkSubscribe's
}

var _ store.Store = (*DB)(nil)

// walPages is the WAL size, in pages, at which a commit checkpoints. At
// SQLite's default (1,000) the commit that crosses it copies the pages back
// into the database and syncs it before its callers are answered; a run
// writes about 30 pages, so every thirtieth run or so waited on that: the
// p99 of enqueue → start on an idle engine (3.2 → 2.2 ms at 10,000, medians
// of 5 rounds; the longest of 3,000 waits 5.4 → 5.9 ms). Fewer checkpoints also
// copy a hot page once instead of ten times. The cost is a WAL of up to
// ~20 MiB beside the database (~40 MiB in one made with 4 KiB pages).
const walPages = 10000

// writerDriver is go-sqlite3 with the writer's connection settings that its
// DSN cannot carry, applied on every (re)connect.
const writerDriver = "sqlite3-holdfast-writer"

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(`PRAGMA wal_autocheckpoint = `+strconv.Itoa(walPages), nil)
		return err
	}})
}

// Open opens (creating if needed) the database and applies pending migrations.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.Path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	sync := strings.ToUpper(cfg.Sync)
	if sync == "" {
		sync = "FULL"
	}
	if sync != "FULL" && sync != "NORMAL" {
		return nil, fmt.Errorf("sqlite: synchronous must be full or normal, got %q", cfg.Sync)
	}
	keepFreedHeap()
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sqlite: create directory: %w", err)
		}
	}
	if err := create(ctx, cfg.Path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "on")
	q.Set("_busy_timeout", "10000")
	q.Set("_synchronous", sync)
	q.Set("_txlock", "immediate")
	// Reuse prepared statements: preparing is most of the CPU a small
	// write costs, and the writer runs the same few statements all day
	// (settings.go says why none of them is prepared again when it runs).
	q.Set("_stmt_cache_size", "256")
	// The writer keeps SQLite's default page cache (2 MiB). SQLite's b-tree
	// balancing swaps page numbers through a placeholder far beyond the
	// file (the pending-byte page), so nearly every write transaction ends
	// by walking the writer cache's whole hash table, whose size follows
	// the cache's. At 64 MiB that walk doubled a small commit on a 110 MB
	// database (210 against 97-119 µs for four rows), and more cache never
	// won it back; misses are served from the OS's page cache.
	w, err := sql.Open(writerDriver, "file:"+cfg.Path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)

	q.Set("_txlock", "deferred")
	q.Set("_query_only", "true")
	// 64 MiB of page cache per reader: hot indexes and recent rows stay in
	// memory while nothing is written (a reader drops its cache when it
	// sees a commit, as WAL requires).
	q.Set("_cache_size", "-65536")
	r, err := sql.Open("sqlite3", "file:"+cfg.Path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	n := cfg.ReadConns
	if n <= 0 {
		n = 8
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)

	db := &DB{w: w, r: r, writes: make(chan *writeReq, 1024), stop: make(chan struct{}), searches: make(chan struct{}, max(1, n/2))}
	db.events.subs, db.events.stop = map[*eventSub]struct{}{}, db.stop
	db.writerWG.Add(1)
	go db.writer()
	if err := db.checkFTS5(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// pageSize is the page size of the databases Open creates: 2 KiB instead
// of SQLite's 4 KiB. A commit writes one WAL frame per page it changed, a
// run changes ~45 b-trees and only a row or two in each, so half-size pages
// halve what the single writer copies, checksums and syncs per run. In
// interleaved rounds against 4 KiB: runs per second 1.10 (minimal workflow),
// 1.18 (four-step), 1.13 (the binary over HTTP), CPU per run 0.90 and 0.88.
// Reads touch more pages for the same rows, which measured within noise
// (docs/benchmarks.md). 1 KiB measured less than 2 KiB (1.04, 1.14).
const pageSize = 2048

// create makes a database that does not exist yet, with pageSize pages and
// in WAL mode. SQLite fixes a database's page size when it writes the first
// page, and a WAL database's page size can no longer change, so the size is
// set on a plain connection before anything sets journal_mode (the DSN's
// would write that first page at 4 KiB). An existing database keeps its
// page size.
func create(ctx context.Context, path string) error {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return nil
	}
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return fmt.Errorf("sqlite: create: %w", err)
	}
	defer db.Close()
	// One connection for both: page_size is a setting of the connection.
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: create: %w", err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA page_size = `+strconv.Itoa(pageSize)); err != nil {
		return fmt.Errorf("sqlite: create: %w", err)
	}
	if _, err := c.ExecContext(ctx, `PRAGMA journal_mode = WAL`); err != nil {
		return fmt.Errorf("sqlite: create: %w", err)
	}
	return nil
}

// ErrNoFTS5 is Open's refusal when mattn/go-sqlite3 was compiled without
// FTS5, which memo search needs: the build lacked -tags sqlite_fts5.
var ErrNoFTS5 = errors.New("sqlite: this binary lacks FTS5; build with -tags sqlite_fts5 (the Makefile does)")

func (db *DB) checkFTS5(ctx context.Context) error {
	var ok int
	if err := db.w.QueryRowContext(ctx, `SELECT sqlite_compileoption_used('ENABLE_FTS5')`).Scan(&ok); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if ok != 1 {
		return ErrNoFTS5
	}
	return nil
}

// searchSlot waits for a text-search slot (see DB.searches) and answers
// the function that frees it.
func (db *DB) searchSlot(ctx context.Context) (func(), error) {
	select {
	case db.searches <- struct{}{}:
		return func() { <-db.searches }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the write batcher (finishing the batch in hand) and closes
// both pools; WAL is checkpointed by SQLite on the last close.
func (db *DB) Close() error {
	err := errors.New("sqlite: already closed")
	db.closeOnce.Do(func() {
		close(db.stop)
		db.writerWG.Wait()
		err = errors.Join(db.r.Close(), db.w.Close())
	})
	return err
}

// Ping checks that both pools answer.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// SchemaVersion is the newest migration this binary knows.
func SchemaVersion() int {
	ms, _ := loadMigrations()
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("sqlite: migration %q lacks a numeric prefix", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("sqlite: two migrations numbered %d", ms[i].version)
		}
	}
	return ms, nil
}

// ErrSchemaTooNew refuses a database written by a newer binary: running old
// code on a newer schema could corrupt data it does not understand.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrations table: %w", err)
	}
	var current int
	if err := db.w.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("sqlite: schema version: %w", err)
	}
	if len(ms) > 0 && current > ms[len(ms)-1].version {
		return fmt.Errorf("sqlite: %w: database is at version %d, this binary knows up to %d; upgrade Holdfast",
			ErrSchemaTooNew, current, ms[len(ms)-1].version)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, formatTime(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// interpretError is the one place driver errors become store sentinels.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint &&
		(se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey) {
		return fmt.Errorf("%w: %s", store.ErrConflict, se.Error())
	}
	return err
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// queryAll runs query and scans every row with scan. Lists are never nil so
// that they encode as [] in JSON.
func queryAll[T any](ctx context.Context, q queryRower, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryRower is satisfied by *sql.DB and *sql.Tx.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
