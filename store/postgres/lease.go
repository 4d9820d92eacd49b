package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// leaseUpsert takes a free or expired lease, or renews the holder's own, in
// one statement: the WHERE of the conflict arm is the compare-and-set. Two
// campaigners meeting on the row are serialised by its row lock, and the
// second one's WHERE sees the first one's write, so at most one wins.
const leaseUpsert = `INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET
    acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at ELSE excluded.acquired_at END,
    holder = excluded.holder,
    expires_at = excluded.expires_at
WHERE leases.holder = excluded.holder OR leases.expires_at <= excluded.acquired_at`

// LeaseAcquire takes or renews name for holder until now+ttl. It is one
// statement outside any transaction and honours ctx throughout: a renewal
// that cannot finish in time is better abandoned than late.
func (db *DB) LeaseAcquire(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("lease acquire %q: name, holder and a positive ttl are required: %w", name, store.ErrInvalid)
	}
	tag, err := db.pool.Exec(ctx, leaseUpsert, name, holder, utc(now), utc(now.Add(ttl)))
	if err != nil {
		return false, fmt.Errorf("lease acquire %q: %w", name, interpretError(err))
	}
	return tag.RowsAffected() == 1, nil
}

// LeaseRelease frees name if holder has it and, with the commit, tells
// every replica that it is free.
func (db *DB) LeaseRelease(ctx context.Context, name, holder string) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			tx.notifyWork(encodeJSON(store.WorkNotice{Kind: store.WorkLeaseFree, Reason: name}))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lease release %q: %w", name, err)
	}
	return nil
}

// LeaseGet reads name as it stands.
func (db *DB) LeaseGet(ctx context.Context, name string) (*store.Lease, error) {
	l := &store.Lease{Name: name}
	err := db.pool.QueryRow(ctx, `SELECT holder, acquired_at, expires_at FROM leases WHERE name = $1`, name).
		Scan(&l.Holder, &l.AcquiredAt, &l.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("lease get %q: %w", name, interpretError(err))
	}
	l.AcquiredAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.ExpiresAt.UTC()
	return l, nil
}

// LeasePrune deletes name-prefixed leases that expired before before.
func (db *DB) LeasePrune(ctx context.Context, prefix string, before time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM leases WHERE left(name, length($1)) = $1 AND expires_at < $2`, prefix, utc(before))
	if err != nil {
		return 0, fmt.Errorf("lease prune %q: %w", prefix, interpretError(err))
	}
	return tag.RowsAffected(), nil
}
