package store

import (
	"context"
	"time"
)

// Lease is a named lease row: one holder at a time until ExpiresAt (SPEC §9,
// the leader of replicas). A row rather than an advisory lock, so that it
// works on both stores, survives a connection pooler that reassigns
// sessions, and can be read by anyone wondering who leads.
type Lease struct {
	Name   string
	Holder string
	// AcquiredAt is when Holder took the lease (renewals keep it).
	AcquiredAt time.Time
	ExpiresAt  time.Time
}

// LeaseStore keeps named leases. The store applies the compare-and-set;
// who campaigns, how often and for how long is the engine's rule.
type LeaseStore interface {
	// LeaseAcquire gives name to holder until now+ttl when the lease is
	// free, expired at now, or already holder's (a renewal), as one
	// compare-and-set; held reports whether holder has it now. A lease
	// another holder keeps past now is refused: held false, no error.
	LeaseAcquire(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (held bool, err error)
	// LeaseRelease frees name if holder has it, so the next campaigner
	// takes it at once rather than at expiry; releasing a lease one does
	// not hold changes nothing and is not an error. On a store shared by
	// processes a release wakes every WorkSubscribe subscriber
	// (WorkLeaseFree).
	LeaseRelease(ctx context.Context, name, holder string) error
	// LeaseGet reads name as it stands (expired or not); a lease never
	// taken is ErrNotFound.
	LeaseGet(ctx context.Context, name string) (*Lease, error)
	// LeasePrune deletes the leases whose names start with prefix and that
	// expired before before, answering how many it deleted.
	LeasePrune(ctx context.Context, prefix string, before time.Time) (int64, error)
}
