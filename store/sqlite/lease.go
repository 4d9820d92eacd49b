package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// leaseUpsert takes a free or expired lease, or renews the holder's own, in
// one statement: the WHERE of the conflict arm is the compare-and-set, and a
// refused upsert changes no row. Times are fixed-width text, so comparing
// them as text compares instants.
const leaseUpsert = `INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET
    acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at ELSE excluded.acquired_at END,
    holder = excluded.holder,
    expires_at = excluded.expires_at
WHERE leases.holder = excluded.holder OR leases.expires_at <= excluded.acquired_at`

// LeaseAcquire takes or renews name for holder until now+ttl.
func (db *DB) LeaseAcquire(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("lease acquire %q: name, holder and a positive ttl are required: %w", name, store.ErrInvalid)
	}
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, leaseUpsert, name, holder, formatTime(now), formatTime(now.Add(ttl)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("lease acquire %q: %w", name, err)
	}
	return n == 1, nil
}

// LeaseRelease frees name if holder has it.
func (db *DB) LeaseRelease(ctx context.Context, name, holder string) error {
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("lease release %q: %w", name, err)
	}
	if n > 0 {
		db.work.notify(store.WorkNotice{Kind: store.WorkLeaseFree, Reason: name})
	}
	return nil
}

// LeaseGet reads name as it stands.
func (db *DB) LeaseGet(ctx context.Context, name string) (*store.Lease, error) {
	l := &store.Lease{Name: name}
	var acquired, expires string
	err := db.r.QueryRowContext(ctx, `SELECT holder, acquired_at, expires_at FROM leases WHERE name = ?`, name).
		Scan(&l.Holder, &acquired, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("lease %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lease get %q: %w", name, err)
	}
	l.AcquiredAt, l.ExpiresAt = parseTime(acquired), parseTime(expires)
	return l, nil
}

// LeasePrune deletes name-prefixed leases that expired before before.
func (db *DB) LeasePrune(ctx context.Context, prefix string, before time.Time) (int64, error) {
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE substr(name, 1, length(?1)) = ?1 AND expires_at < ?2`,
			prefix, formatTime(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("lease prune %q: %w", prefix, err)
	}
	return n, nil
}
