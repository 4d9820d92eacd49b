// Package postgres is the PostgreSQL implementation of store.Store, for
// running Holdfast as several replicas on one database (SPEC §9). It holds
// SQL and nothing else: every rule lives in the engine, as for store/sqlite,
// whose statements these translate.
//
// Connections come from a pgxpool; every write is one READ COMMITTED
// transaction run under context.WithoutCancel once started, so a caller's
// cancellation never strands a half-applied write. Transcript events are
// inserted last in their transaction under a transaction-level advisory
// lock, which makes event ids commit in id order: a reader that has seen
// event n has seen every committed event below it (the Slack mirror's
// cursor and EventSubscribe rely on that). Wake-ups cross replicas through
// LISTEN/NOTIFY on one dedicated connection (notify.go).
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast-bot/holdfast/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// IsURL reports whether dsn names a PostgreSQL database (SPEC §9: a
// postgres:// or postgresql:// HOLDFAST_DB); anything else is a SQLite path.
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Config opens a database.
type Config struct {
	// URL is a postgres:// connection string; pgx's pool_max_conns and
	// other pool parameters apply.
	URL string
	// MaxConns bounds the pool when the URL does not (default 16).
	MaxConns int32
	// Tracer, when set, sees every statement the pool runs (benchmarks
	// count database round trips with it).
	Tracer pgx.QueryTracer
}

// DB is the PostgreSQL store.
type DB struct {
	pool *pgxpool.Pool
	// searches holds a slot per text search in flight (memo full-text
	// search, session text filter): at most half the pool, as on SQLite, so
	// however many searches arrive at once every other query finds a
	// connection.
	searches chan struct{}
	// schema is the schema the tables live in; channel names and advisory
	// lock keys are derived from it so that schemas sharing a database
	// (tests) do not share locks or notifications.
	schema         string
	eventsChannel  string
	workChannel    string
	eventsLockKey  int64
	migrateLockKey int64

	listener  *listener
	stop      chan struct{}
	closeOnce sync.Once
}

var _ store.Store = (*DB)(nil)

// Open connects, applies pending migrations and starts the listener.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if !IsURL(cfg.URL) {
		return nil, errors.New("postgres: the database URL must start with postgres:// or postgresql://")
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = 16
		if cfg.MaxConns > 0 {
			pc.MaxConns = cfg.MaxConns
		}
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUTC(c)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	db := &DB{pool: pool, searches: make(chan struct{}, max(1, int(pc.MaxConns)/2)), stop: make(chan struct{})}
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&db.schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	db.eventsChannel = "holdfast_events_" + channelSuffix(db.schema)
	db.workChannel = "holdfast_work_" + channelSuffix(db.schema)
	db.eventsLockKey = lockKey(db.schema, "events")
	db.migrateLockKey = lockKey(db.schema, "migrate")
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	db.listener = newListener(db, pc.ConnConfig.Copy())
	return db, nil
}

// registerUTC makes timestamptz values scan as UTC times, as the SQLite
// store answers them.
func registerUTC(c *pgx.Conn) {
	c.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
}

func channelSuffix(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return strconv.FormatUint(h.Sum64(), 36)
}

func lockKey(schema, what string) int64 {
	h := fnv.New64a()
	h.Write([]byte("holdfast:" + schema + ":" + what))
	return int64(h.Sum64())
}

// Close stops the listener and closes the pool.
func (db *DB) Close() error {
	err := errors.New("postgres: already closed")
	db.closeOnce.Do(func() {
		close(db.stop)
		db.listener.close()
		db.pool.Close()
		err = nil
	})
	return err
}

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// searchSlot waits for a text-search slot (see DB.searches).
func (db *DB) searchSlot(ctx context.Context) (func(), error) {
	select {
	case db.searches <- struct{}{}:
		return func() { <-db.searches }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
			return nil, fmt.Errorf("postgres: migration %q lacks a numeric prefix", e.Name())
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
			return nil, fmt.Errorf("postgres: two migrations numbered %d", ms[i].version)
		}
	}
	return ms, nil
}

// ErrSchemaTooNew refuses a database written by a newer binary: running old
// code on a newer schema could corrupt data it does not understand.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// migrate applies pending migrations, each in its own transaction with its
// version row. Replicas starting together take turns through a session
// advisory lock, so each migration runs once.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, db.migrateLockKey); err != nil {
		return fmt.Errorf("postgres: migrate lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, db.migrateLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: migrations table: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("postgres: schema version: %w", err)
	}
	if len(ms) > 0 && current > ms[len(ms)-1].version {
		return fmt.Errorf("postgres: %w: database is at version %d, this binary knows up to %d; upgrade Holdfast",
			ErrSchemaTooNew, current, ms[len(ms)-1].version)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// interpretError is the one place driver errors become store sentinels
// (River's interpretError): no rows is ErrNotFound, a unique violation
// ErrConflict.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", store.ErrConflict, pe.Message)
		case "22021", "22P05": // invalid byte sequence, untranslatable character (NUL)
			return fmt.Errorf("%w: %s", store.ErrInvalid, pe.Message)
		}
	}
	return err
}

// isConstraint reports whether err is a unique violation (after
// interpretError).
func isConflict(err error) bool { return errors.Is(interpretError(err), store.ErrConflict) }

// retryable reports whether a transaction failed for a reason a re-run may
// not meet again: a deadlock or a serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(...any) error }

// queryAll runs query and scans every row with scan. Lists are never nil so
// that they encode as [] in JSON.
func queryAll[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
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

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// utc truncates t to what PostgreSQL keeps (microseconds), in UTC.
func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
