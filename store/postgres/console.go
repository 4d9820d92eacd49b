package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// ConsoleSessionCreate stores a sign-in session.
func (db *DB) ConsoleSessionCreate(ctx context.Context, s *store.ConsoleSession) (*store.ConsoleSession, error) {
	if s.ID == "" || s.SecretHash == "" || s.UserID == "" || s.CSRFToken == "" || s.ExpiresAt.IsZero() {
		return nil, fmt.Errorf("console session create: id, secret hash, user, csrf token and expiry are required")
	}
	now := utc(time.Now())
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		_, err := tx.Exec(ctx, `INSERT INTO console_sessions (id, secret_hash, user_id, csrf_token, user_agent, ip, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, s.ID, s.SecretHash, s.UserID, s.CSRFToken, s.UserAgent, s.IP, now, s.ExpiresAt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("console session create: %w", err)
	}
	u, err := db.UserGetByID(ctx, s.UserID)
	if err != nil {
		return nil, fmt.Errorf("console session create: %w", err)
	}
	out := *s
	out.CreatedAt = now
	out.User = u
	return &out, nil
}

// ConsoleSessionGetByID reads an unexpired session joined with its user, in
// one query: this runs on every console request.
func (db *DB) ConsoleSessionGetByID(ctx context.Context, id string) (*store.ConsoleSession, error) {
	var (
		s store.ConsoleSession
		u store.User
	)
	err := db.pool.QueryRow(ctx, `SELECT cs.id, cs.secret_hash, cs.user_id, cs.csrf_token, cs.user_agent, cs.ip,
		cs.created_at, cs.expires_at, u.id, u.username, u.password_hash, u.role, COALESCE(u.slack_user_id, ''), u.disabled, u.created_at
		FROM console_sessions cs JOIN users u ON u.id = cs.user_id
		WHERE cs.id = $1 AND cs.expires_at > $2`, id, time.Now()).
		Scan(&s.ID, &s.SecretHash, &s.UserID, &s.CSRFToken, &s.UserAgent, &s.IP, &s.CreatedAt, &s.ExpiresAt,
			&u.ID, &u.Username, &u.PasswordHash, &u.Role, &u.SlackUserID, &u.Disabled, &u.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("console session: %w", interpretError(err))
	}
	s.User = &u
	return &s, nil
}

// ConsoleSessionDelete removes a session.
func (db *DB) ConsoleSessionDelete(ctx context.Context, id string) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("console session delete: %w", err)
	}
	return nil
}

// ConsoleSessionDeleteExpired removes sessions that expired before now.
func (db *DB) ConsoleSessionDeleteExpired(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1`, now)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("console session delete expired: %w", err)
	}
	return int(n), nil
}

// UserRoleSet changes a user's role.
func (db *DB) UserRoleSet(ctx context.Context, userID, role string) (*store.User, error) {
	if !store.ValidRole(role) {
		return nil, fmt.Errorf("user role set: invalid role %q", role)
	}
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, `UPDATE users SET role = $1 WHERE id = $2`, role, userID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("user role set %s: %w", userID, err)
	}
	return db.UserGetByID(ctx, userID)
}

// SignInFailureList reads the current windows of keys.
func (db *DB) SignInFailureList(ctx context.Context, p *store.SignInFailureListParams) ([]*store.SignInFailure, error) {
	if len(p.Keys) == 0 {
		return []*store.SignInFailure{}, nil
	}
	out, err := queryAll(ctx, db.pool, func(row scanner) (*store.SignInFailure, error) {
		var f store.SignInFailure
		return &f, row.Scan(&f.Key, &f.Failures, &f.WindowStart)
	}, `SELECT key, failures, window_start FROM sign_in_failures
		WHERE window_start > $1 AND key = ANY ($2) ORDER BY key`, p.Since, p.Keys)
	if err != nil {
		return nil, fmt.Errorf("sign-in failures: %w", err)
	}
	return out, nil
}

// SignInFailureAddMany counts one failure per key, restarting windows that
// are over, and prunes windows that are over. The upsert is atomic per row,
// so replicas counting the same key concurrently lose no failure.
func (db *DB) SignInFailureAddMany(ctx context.Context, p *store.SignInFailureAddManyParams) error {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		// Keys in order, so two replicas counting the same keys lock their
		// rows in the same order and never deadlock.
		if _, err := tx.Exec(ctx, `INSERT INTO sign_in_failures (key, failures, window_start)
			SELECT DISTINCT k, 1, $2::timestamptz FROM unnest($1::text[]) AS k ORDER BY k
			ON CONFLICT (key) DO UPDATE SET
				failures = CASE WHEN sign_in_failures.window_start <= $3 THEN 1 ELSE sign_in_failures.failures + 1 END,
				window_start = CASE WHEN sign_in_failures.window_start <= $3 THEN excluded.window_start ELSE sign_in_failures.window_start END`,
			p.Keys, p.Now, p.Since); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM sign_in_failures WHERE window_start <= $1`, p.Since)
		return err
	})
	if err != nil {
		return fmt.Errorf("sign-in failure add: %w", err)
	}
	return nil
}

// SignInFailureDeleteMany forgets keys.
func (db *DB) SignInFailureDeleteMany(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM sign_in_failures WHERE key = ANY ($1)`, keys)
		return err
	})
	if err != nil {
		return fmt.Errorf("sign-in failure delete: %w", err)
	}
	return nil
}

// userSet runs one UPDATE of a user (ErrNotFound when there is none) and
// optionally ends the user's sign-in sessions in the same transaction.
func (db *DB) userSet(ctx context.Context, what, userID string, endSessions bool, q string, args ...any) (*store.User, error) {
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		tag, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		if endSessions {
			_, err = tx.Exec(ctx, `DELETE FROM console_sessions WHERE user_id = $1`, userID)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("user %s set %s: %w", userID, what, err)
	}
	return db.UserGetByID(ctx, userID)
}

// UserDisabledSet disables (ending the user's sessions) or enables a user.
func (db *DB) UserDisabledSet(ctx context.Context, userID string, disabled bool) (*store.User, error) {
	return db.userSet(ctx, "disabled", userID, disabled, `UPDATE users SET disabled = $1 WHERE id = $2`, disabled, userID)
}

// UserPasswordSet replaces a user's password hash and ends their sessions.
func (db *DB) UserPasswordSet(ctx context.Context, userID, passwordHash string) (*store.User, error) {
	if passwordHash == "" {
		return nil, fmt.Errorf("user %s set password: empty hash", userID)
	}
	return db.userSet(ctx, "password", userID, true, `UPDATE users SET password_hash = $1 WHERE id = $2`, passwordHash, userID)
}

// draftTTL is how long a console draft is kept.
const draftTTL = 24 * time.Hour

// ConsoleDraftCreate stores a draft and drops drafts older than a day.
func (db *DB) ConsoleDraftCreate(ctx context.Context, d *store.ConsoleDraft) error {
	if d.ID == "" || d.SessionID == "" {
		return fmt.Errorf("console draft create: id and session are required")
	}
	now := utc(time.Now())
	err := db.tx(ctx, func(ctx context.Context, tx *txn) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_drafts WHERE created_at < $1`, now.Add(-draftTTL)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO console_drafts (id, session_id, body, created_at) VALUES ($1, $2, $3, $4)`,
			d.ID, d.SessionID, d.Body, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("console draft create: %w", err)
	}
	return nil
}

// ConsoleDraftGetByID reads one of a session's drafts.
func (db *DB) ConsoleDraftGetByID(ctx context.Context, id, sessionID string) (*store.ConsoleDraft, error) {
	var d store.ConsoleDraft
	err := db.pool.QueryRow(ctx, `SELECT id, session_id, body, created_at FROM console_drafts
		WHERE id = $1 AND session_id = $2 AND created_at >= $3`, id, sessionID, time.Now().Add(-draftTTL)).
		Scan(&d.ID, &d.SessionID, &d.Body, &d.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("console draft %s: %w", id, interpretError(err))
	}
	return &d, nil
}
