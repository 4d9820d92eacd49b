package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// SlackUserGet reads a cached Slack user name.
func (db *DB) SlackUserGet(ctx context.Context, id string) (*store.SlackUser, error) {
	var (
		u       store.SlackUser
		fetched string
	)
	err := db.r.QueryRowContext(ctx, `SELECT id, name, fetched_at FROM slack_users WHERE id = ?`, id).Scan(&u.ID, &u.Name, &fetched)
	if err != nil {
		return nil, fmt.Errorf("slack user %s: %w", id, interpretError(err))
	}
	u.FetchedAt = parseTime(fetched)
	return &u, nil
}

// SlackUserList lists every cached Slack user, by id.
func (db *DB) SlackUserList(ctx context.Context) ([]*store.SlackUser, error) {
	out, err := queryAll(ctx, db.r, func(r scanner) (*store.SlackUser, error) {
		var (
			u       store.SlackUser
			fetched string
		)
		err := r.Scan(&u.ID, &u.Name, &fetched)
		u.FetchedAt = parseTime(fetched)
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
	at := u.FetchedAt
	if at.IsZero() {
		at = time.Now()
	}
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO slack_users (id, name, fetched_at) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, fetched_at = excluded.fetched_at`, u.ID, u.Name, formatTime(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("slack user put %s: %w", u.ID, err)
	}
	return nil
}

const backfillColumns = `session_id, channel, thread_ts, before_ts, cursor, done, fetched, attempts, next_at, last_error, created_at, updated_at`

func scanBackfill(row scanner) (*store.SlackBackfill, error) {
	var (
		b                      store.SlackBackfill
		done                   int
		next, created, updated string
	)
	if err := row.Scan(&b.SessionID, &b.Channel, &b.ThreadTS, &b.Before, &b.Cursor, &done, &b.Fetched, &b.Attempts,
		&next, &b.LastError, &created, &updated); err != nil {
		return nil, interpretError(err)
	}
	b.Done = done != 0
	b.NextAt, b.CreatedAt, b.UpdatedAt = parseTime(next), parseTime(created), parseTime(updated)
	return &b, nil
}

func backfillGet(ctx context.Context, q queryRower, sessionID string) (*store.SlackBackfill, error) {
	return scanBackfill(q.QueryRowContext(ctx, `SELECT `+backfillColumns+` FROM slack_backfills WHERE session_id = ?`, sessionID))
}

// SlackBackfillAdd starts a backfill, due at once; an existing one is kept.
func (db *DB) SlackBackfillAdd(ctx context.Context, p *store.SlackBackfillAddParams) (*store.SlackBackfill, error) {
	var b *store.SlackBackfill
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, p.SessionID).Scan(&one); err != nil {
			return fmt.Errorf("session %s: %w", p.SessionID, interpretError(err))
		}
		now := formatTime(time.Now())
		if _, err := tx.ExecContext(ctx, `INSERT INTO slack_backfills (session_id, channel, thread_ts, before_ts, next_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING`, p.SessionID, p.Channel, p.ThreadTS, p.Before, now, now, now); err != nil {
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
	b, err := backfillGet(ctx, db.r, sessionID)
	if err != nil {
		return nil, fmt.Errorf("slack backfill %s: %w", sessionID, err)
	}
	return b, nil
}

// The backfill worker's polling queries walk slack_backfills_due, which
// holds pending backfills only.
const (
	backfillDueQuery     = `SELECT ` + backfillColumns + ` FROM slack_backfills WHERE done = 0 AND next_at <= ? ORDER BY next_at LIMIT ?`
	backfillNextDueQuery = `SELECT MIN(next_at) FROM slack_backfills WHERE done = 0`
)

// SlackBackfillDue lists pending backfills due at now.
func (db *DB) SlackBackfillDue(ctx context.Context, now time.Time, limit int) ([]*store.SlackBackfill, error) {
	out, err := queryAll(ctx, db.r, scanBackfill, backfillDueQuery, formatTime(now), limit)
	if err != nil {
		return nil, fmt.Errorf("slack backfill due: %w", err)
	}
	return out, nil
}

// SlackBackfillNextDue answers when the soonest pending backfill is due.
func (db *DB) SlackBackfillNextDue(ctx context.Context) (time.Time, error) {
	var next sql.NullString
	if err := db.r.QueryRowContext(ctx, backfillNextDueQuery).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("slack backfill next due: %w", interpretError(err))
	}
	if !next.Valid {
		return time.Time{}, fmt.Errorf("slack backfill next due: %w", store.ErrNotFound)
	}
	return parseTime(next.String), nil
}

// SlackBackfillPage records a page and moves the cursor, a compare-and-set
// on the cursor it was fetched from.
func (db *DB) SlackBackfillPage(ctx context.Context, p *store.SlackBackfillPageParams) (*store.SlackBackfill, error) {
	var b *store.SlackBackfill
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := formatTime(time.Now())
		res, err := tx.ExecContext(ctx, `UPDATE slack_backfills SET cursor = ?, done = ?, fetched = fetched + ?, attempts = 0,
			last_error = '', next_at = ?, updated_at = ? WHERE session_id = ? AND cursor = ? AND done = 0`,
			p.Next, boolInt(p.Done), len(p.Events), now, now, p.SessionID, p.Cursor)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := backfillGet(ctx, tx, p.SessionID); err != nil {
				return err
			}
			return fmt.Errorf("%w: the backfill moved past cursor %q", store.ErrConflict, p.Cursor)
		}
		for _, ev := range p.Events {
			e := *ev
			e.SessionID = p.SessionID
			if _, err := eventAppendTx(ctx, tx, &e); err != nil {
				return err
			}
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
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE slack_backfills SET attempts = attempts + 1, next_at = ?, last_error = ?, updated_at = ?
			WHERE session_id = ? AND done = 0`, formatTime(next), errMsg, formatTime(time.Now()), sessionID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("pending backfill %s: %w", sessionID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("slack backfill retry: %w", err)
	}
	return nil
}
