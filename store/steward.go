package store

import (
	"context"
	"time"
)

// StewardStore keeps what stewardship outside the console needs: hold
// reminders (Policy `Remind after`, SPEC §4.3) and the reads behind a
// Slack user's App Home (SPEC §5). The engine decides when a reminder is
// due and what it says; the store applies it.
type StewardStore interface {
	// HoldListRemindDue lists open holds whose next reminder is due at now,
	// the most overdue first.
	HoldListRemindDue(ctx context.Context, now time.Time, limit int) ([]*Hold, error)
	// HoldRemind records one reminder; see HoldRemindParams.
	HoldRemind(ctx context.Context, p *HoldRemindParams) (*Hold, error)
	// RunListByOwner lists the runs of items ownerUID enqueued ("slack:U1",
	// "user:<id>"), newest first.
	RunListByOwner(ctx context.Context, ownerUID string, limit int) ([]*Run, error)
}

// HoldRemindParams records a reminder the engine sends: the hold's count
// of reminders goes from ExpectSent to ExpectSent+1, its next reminder is
// due at Next (nil: no more), and Events (the reminder itself) are
// appended to the hold's session, in one transaction. It is a
// compare-and-set: a hold no longer open, or reminded meanwhile, is
// ErrConflict and nothing is written.
type HoldRemindParams struct {
	HoldID     string
	ExpectSent int
	Next       *time.Time
	Now        time.Time
	Events     []EventAppendParams
}
