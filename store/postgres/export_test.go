package postgres

import "context"

// ExecForTest runs one statement on db's pool.
func ExecForTest(ctx context.Context, db *DB, sql string, args ...any) error {
	_, err := db.pool.Exec(ctx, sql, args...)
	return err
}
