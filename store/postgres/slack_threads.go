package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// SlackUserGet reads a cached Slack user name.
func (db *DB) SlackUserGet(ctx context.Context, id string) (*store.SlackUser, error) {
	var u store.SlackUser
	err := db.pool.QueryRow(ctx, `SELECT id, name, fetched_at FROM slack_users WHERE id = $1`, id).Scan(&u.ID, &u.Name, &u.FetchedAt)
	if err != nil {
		return nil, fmt.Errorf("slack user %s: %w", id, interpretError(err))
	}
	return &u, nil
}

// SlackUserList lists every cached Slack user, by id.
func (db *DB) SlackUserList(ctx context.Context) ([]*store.SlackUser, error) {
	out, err := queryAll(ctx, db.pool, func(r scanner) (*store.SlackUser, error) {
		var u store.SlackUser
		err := r.Scan(&u.ID, &u.Name, &u.FetchedAt)
		return &u, err
	}, `SELECT id, name, fetched_at FROM slack_users ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("slack user list: %w", err)
	}
	return out, nil
}

// SlackUserPut caches a Slack user name.
func (db *DB) SlackUserPut(ctx context.Context, u *store.SlackUser) error {
	if u.ID == "" {
		return fmt.Errorf("slack user put: %w", store.Refuse(store.ErrInvalid, "a Slack user needs an id"))
	}
	at := utc(nowOr(u.FetchedAt))
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_users (id, name, fetched_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, fetched_at = excluded.fetched_at`, u.ID, u.Name, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("slack user put %s: %w", u.ID, err)
	}
	return nil
}

const backfillColumns = `session_id, channel, thread_ts, before_ts, cursor, done, fetched, attempts, next_at, last_error, created_at, updated_at`

func scanBackfill(row scanner) (*store.SlackBackfill, error) {
	var b store.SlackBackfill
	if err := row.Scan(&b.SessionID, &b.Channel, &b.ThreadTS, &b.Before, &b.Cursor, &b.Done, &b.Fetched, &b.Attempts,
		&b.NextAt, &b.LastError, &b.CreatedAt, &b.UpdatedAt); err != nil {
		return nil, interpretError(err)
	}
	return &b, nil
}

func backfillGet(ctx context.Context, q querier, sessionID string) (*store.SlackBackfill, error) {
	return scanBackfill(q.QueryRow(ctx, `SELECT `+backfillColumns+` FROM slack_backfills WHERE session_id = $1`, sessionID))
}

// SlackBackfillAdd starts a backfill, due at once; an existing one is kept.
func (db *DB) SlackBackfillAdd(ctx context.Context, p *store.SlackBackfillAddParams) (*store.SlackBackfill, error) {
	var b *store.SlackBackfill
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, p.SessionID).Scan(&one); err != nil {
			return fmt.Errorf("session %s: %w", p.SessionID, interpretError(err))
		}
		now := utc(time.Now())
		if _, err := tx.Exec(ctx, `INSERT INTO slack_backfills (session_id, channel, thread_ts, before_ts, next_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $5, $5) ON CONFLICT (session_id) DO NOTHING`, p.SessionID, p.Channel, p.ThreadTS, p.Before, now); err != nil {
			return err
		}
		var err error
		b, err = backfillGet(ctx, tx, p.SessionID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack backfill add %s: %w", p.SessionID, err)
	}
	return b, nil
}

// SlackBackfillGet reads a session's backfill.
func (db *DB) SlackBackfillGet(ctx context.Context, sessionID string) (*store.SlackBackfill, error) {
	b, err := backfillGet(ctx, db.pool, sessionID)
	if err != nil {
		return nil, fmt.Errorf("slack backfill %s: %w", sessionID, err)
	}
	return b, nil
}

// The backfill worker's polling queries walk slack_backfills_due, which
// holds pending backfills only.
const (
	backfillDueQuery     = `SELECT ` + backfillColumns + ` FROM slack_backfills WHERE NOT done AND next_at <= $1 ORDER BY next_at, session_id LIMIT $2`
	backfillNextDueQuery = `SELECT MIN(next_at) FROM slack_backfills WHERE NOT done`
)

// SlackBackfillDue lists pending backfills due at now.
func (db *DB) SlackBackfillDue(ctx context.Context, now time.Time, limit int) ([]*store.SlackBackfill, error) {
	out, err := queryAll(ctx, db.pool, scanBackfill, backfillDueQuery, utc(now), limit)
	if err != nil {
		return nil, fmt.Errorf("slack backfill due: %w", err)
	}
	return out, nil
}

// SlackBackfillNextDue answers when the soonest pending backfill is due.
func (db *DB) SlackBackfillNextDue(ctx context.Context) (time.Time, error) {
	var next *time.Time
	if err := db.pool.QueryRow(ctx, backfillNextDueQuery).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("slack backfill next due: %w", interpretError(err))
	}
	if next == nil {
		return time.Time{}, fmt.Errorf("slack backfill next due: %w", store.ErrNotFound)
	}
	return *next, nil
}

// SlackBackfillPage records a page and moves the cursor, a compare-and-set
// on the cursor it was fetched from: a concurrent writer of the same page
// waits on the row lock, then finds the cursor moved and records nothing.
func (db *DB) SlackBackfillPage(ctx context.Context, p *store.SlackBackfillPageParams) (*store.SlackBackfill, error) {
	var b *store.SlackBackfill
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		now := utc(time.Now())
		tag, err := tx.Exec(ctx, `UPDATE slack_backfills SET cursor = $1, done = $2, fetched = fetched + $3, attempts = 0,
			last_error = '', next_at = $4, updated_at = $4 WHERE session_id = $5 AND cursor = $6 AND NOT done`,
			p.Next, p.Done, len(p.Events), now, p.SessionID, p.Cursor)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			if _, err := backfillGet(ctx, tx, p.SessionID); err != nil {
				return err
			}
			return fmt.Errorf("%w: the backfill moved past cursor %q", store.ErrConflict, p.Cursor)
		}
		evs := make([]store.EventAppendParams, len(p.Events))
		for i, ev := range p.Events {
			evs[i] = *ev
			evs[i].SessionID = p.SessionID
		}
		if err := appendEventList(ctx, tx, p.SessionID, evs); err != nil {
			return err
		}
		b, err = backfillGet(ctx, tx, p.SessionID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack backfill page %s: %w", p.SessionID, err)
	}
	return b, nil
}

// SlackBackfillRetry records a failed fetch and the next attempt's time.
func (db *DB) SlackBackfillRetry(ctx context.Context, sessionID string, next time.Time, errMsg string) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `UPDATE slack_backfills SET attempts = attempts + 1, next_at = $1, last_error = $2, updated_at = $3
			WHERE session_id = $4 AND NOT done`, utc(next), errMsg, utc(time.Now()), sessionID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("pending backfill %s: %w", sessionID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("slack backfill retry: %w", err)
	}
	return nil
}
