package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

// ConsoleSessionCreate stores a sign-in session.
func (db *DB) ConsoleSessionCreate(ctx context.Context, s *store.ConsoleSession) (*store.ConsoleSession, error) {
	if s.ID == "" || s.SecretHash == "" || s.UserID == "" || s.CSRFToken == "" || s.ExpiresAt.IsZero() {
		return nil, fmt.Errorf("console session create: id, secret hash, user, csrf token and expiry are required")
	}
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO console_sessions (id, secret_hash, user_id, csrf_token, user_agent, ip, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, s.ID, s.SecretHash, s.UserID, s.CSRFToken, s.UserAgent, s.IP,
			formatTime(time.Now()), formatTime(s.ExpiresAt))
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
	out.CreatedAt = time.Now().UTC()
	out.User = u
	return &out, nil
}

// ConsoleSessionGetByID reads an unexpired session joined with its user, in
// one query: this runs on every console request.
func (db *DB) ConsoleSessionGetByID(ctx context.Context, id string) (*store.ConsoleSession, error) {
	var (
		s                store.ConsoleSession
		created, expires string
	)
	u, err := scanUser(scanFunc(func(dest ...any) error {
		all := append([]any{&s.ID, &s.SecretHash, &s.UserID, &s.CSRFToken, &s.UserAgent, &s.IP, &created, &expires}, dest...)
		return db.r.QueryRowContext(ctx, `SELECT cs.id, cs.secret_hash, cs.user_id, cs.csrf_token, cs.user_agent, cs.ip,
			cs.created_at, cs.expires_at,
			u.id, u.username, u.password_hash, u.role, COALESCE(u.slack_user_id, ''), u.disabled, u.created_at
			FROM console_sessions cs JOIN users u ON u.id = cs.user_id
			WHERE cs.id = ? AND cs.expires_at > ?`, id, formatTime(time.Now())).Scan(all...)
	}))
	if err != nil {
		return nil, fmt.Errorf("console session: %w", err)
	}
	s.CreatedAt, s.ExpiresAt = parseTime(created), parseTime(expires)
	s.User = u
	return &s, nil
}

type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// ConsoleSessionDelete removes a session.
func (db *DB) ConsoleSessionDelete(ctx context.Context, id string) error {
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE id = ?`, id)
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
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at <= ?`, formatTime(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
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
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET role = ? WHERE id = ?`, role, userID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("user role set %s: %w", userID, err)
	}
	return db.UserGetByID(ctx, userID)
}

// SignInFailureList reads the current windows of keys (one primary-key
// lookup each).
func (db *DB) SignInFailureList(ctx context.Context, p *store.SignInFailureListParams) ([]*store.SignInFailure, error) {
	if len(p.Keys) == 0 {
		return []*store.SignInFailure{}, nil
	}
	args := []any{formatTime(p.Since)}
	for _, k := range p.Keys {
		args = append(args, k)
	}
	out, err := queryAll(ctx, db.r, func(row scanner) (*store.SignInFailure, error) {
		var (
			f     store.SignInFailure
			start string
		)
		if err := row.Scan(&f.Key, &f.Failures, &start); err != nil {
			return nil, err
		}
		f.WindowStart = parseTime(start)
		return &f, nil
	}, `SELECT key, failures, window_start FROM sign_in_failures
		WHERE window_start > ? AND key IN (?`+strings.Repeat(", ?", len(p.Keys)-1)+`) ORDER BY key`, args...)
	if err != nil {
		return nil, fmt.Errorf("sign-in failures: %w", err)
	}
	return out, nil
}

// SignInFailureAddMany counts one failure per key, restarting windows that
// are over, and prunes windows that are over (an index range on
// window_start), so the table holds only live windows.
func (db *DB) SignInFailureAddMany(ctx context.Context, p *store.SignInFailureAddManyParams) error {
	now, since := formatTime(p.Now), formatTime(p.Since)
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, k := range p.Keys {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sign_in_failures (key, failures, window_start) VALUES (?, 1, ?)
				ON CONFLICT (key) DO UPDATE SET
					failures = CASE WHEN window_start <= ? THEN 1 ELSE failures + 1 END,
					window_start = CASE WHEN window_start <= ? THEN excluded.window_start ELSE window_start END`,
				k, now, since, since); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM sign_in_failures WHERE window_start <= ?`, since)
		return err
	})
	if err != nil {
		return fmt.Errorf("sign-in failure add: %w", err)
	}
	return nil
}

// userSet runs one UPDATE of a user (ErrNotFound when there is none) and
// optionally ends the user's sign-in sessions in the same transaction.
func (db *DB) userSet(ctx context.Context, what, userID string, endSessions bool, q string, args ...any) (*store.User, error) {
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		if endSessions {
			_, err = tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE user_id = ?`, userID)
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
	return db.userSet(ctx, "disabled", userID, disabled, `UPDATE users SET disabled = ? WHERE id = ?`, boolInt(disabled), userID)
}

// UserPasswordSet replaces a user's password hash and ends their sessions.
func (db *DB) UserPasswordSet(ctx context.Context, userID, passwordHash string) (*store.User, error) {
	if passwordHash == "" {
		return nil, fmt.Errorf("user %s set password: empty hash", userID)
	}
	return db.userSet(ctx, "password", userID, true, `UPDATE users SET password_hash = ? WHERE id = ?`, passwordHash, userID)
}

// draftTTL is how long a console draft is kept.
const draftTTL = 24 * time.Hour

// ConsoleDraftCreate stores a draft and drops drafts older than a day.
func (db *DB) ConsoleDraftCreate(ctx context.Context, d *store.ConsoleDraft) error {
	if d.ID == "" || d.SessionID == "" {
		return fmt.Errorf("console draft create: id and session are required")
	}
	now := time.Now()
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM console_drafts WHERE created_at < ?`, formatTime(now.Add(-draftTTL))); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO console_drafts (id, session_id, body, created_at) VALUES (?, ?, ?, ?)`,
			d.ID, d.SessionID, d.Body, formatTime(now))
		return err
	})
	if err != nil {
		return fmt.Errorf("console draft create: %w", err)
	}
	return nil
}

// SignInFailureDeleteMany forgets keys.
func (db *DB) SignInFailureDeleteMany(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM sign_in_failures WHERE key IN (?`+strings.Repeat(", ?", len(keys)-1)+`)`, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sign-in failure delete: %w", err)
	}
	return nil
}

// ConsoleDraftGetByID reads one of a session's drafts.
func (db *DB) ConsoleDraftGetByID(ctx context.Context, id, sessionID string) (*store.ConsoleDraft, error) {
	var (
		d       store.ConsoleDraft
		created string
	)
	err := db.r.QueryRowContext(ctx, `SELECT id, session_id, body, created_at FROM console_drafts
		WHERE id = ? AND session_id = ? AND created_at >= ?`, id, sessionID, formatTime(time.Now().Add(-draftTTL))).
		Scan(&d.ID, &d.SessionID, &d.Body, &created)
	if err != nil {
		return nil, fmt.Errorf("console draft %s: %w", id, interpretError(err))
	}
	d.CreatedAt = parseTime(created)
	return &d, nil
}
