package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/holdfast-bot/holdfast/store"
)

const userColumns = `id, username, password_hash, role, COALESCE(slack_user_id, ''), disabled, created_at`

func scanUser(row scanner) (*store.User, error) {
	var (
		u        store.User
		disabled int
		created  string
	)
	if err := row.Scan(&u.ID, &u.Username, &u.PasswordHash, &u.Role, &u.SlackUserID, &disabled, &created); err != nil {
		return nil, interpretError(err)
	}
	u.Disabled = disabled != 0
	u.CreatedAt = parseTime(created)
	return &u, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// UserCreate inserts a user; a taken username or Slack id is ErrConflict.
func (db *DB) UserCreate(ctx context.Context, u *store.User) (*store.User, error) {
	if !store.ValidRole(u.Role) {
		return nil, fmt.Errorf("user create: invalid role %q", u.Role)
	}
	id := store.NewID("usr")
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO users (id, username, password_hash, role, slack_user_id, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, id, u.Username, u.PasswordHash, u.Role, nullable(u.SlackUserID), formatTime(time.Now()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("user create %s: %w", u.Username, err)
	}
	return db.UserGetByID(ctx, id)
}

func (db *DB) userGet(ctx context.Context, where string, arg any) (*store.User, error) {
	u, err := scanUser(db.r.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE `+where, arg))
	if err != nil {
		return nil, fmt.Errorf("user %v: %w", arg, err)
	}
	return u, nil
}

// UserGetByID reads a user by id.
func (db *DB) UserGetByID(ctx context.Context, id string) (*store.User, error) {
	return db.userGet(ctx, "id = ?", id)
}

// UserGetByUsername reads a user by name, case-insensitively.
func (db *DB) UserGetByUsername(ctx context.Context, username string) (*store.User, error) {
	return db.userGet(ctx, "username = ?", username)
}

// UserGetBySlackID reads the user linked to a Slack user id.
func (db *DB) UserGetBySlackID(ctx context.Context, slackUserID string) (*store.User, error) {
	return db.userGet(ctx, "slack_user_id = ?", slackUserID)
}

// UserList lists users by name.
func (db *DB) UserList(ctx context.Context) ([]*store.User, error) {
	out, err := queryAll(ctx, db.r, scanUser, `SELECT `+userColumns+` FROM users ORDER BY username`)
	if err != nil {
		return nil, fmt.Errorf("user list: %w", err)
	}
	return out, nil
}

// UserCount counts users (first start creates admin when zero).
func (db *DB) UserCount(ctx context.Context) (int, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		return 0, fmt.Errorf("user count: %w", err)
	}
	return n, nil
}

// APIKeyCreate stores a key's hash.
func (db *DB) APIKeyCreate(ctx context.Context, k *store.APIKey) (*store.APIKey, error) {
	if !store.ValidRole(k.Role) {
		return nil, fmt.Errorf("api key create: invalid role %q", k.Role)
	}
	out := *k
	out.ID = store.NewID("key")
	out.CreatedAt = time.Now().UTC()
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, name, role, key_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			out.ID, out.Name, out.Role, out.KeyHash, formatTime(out.CreatedAt))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("api key create: %w", err)
	}
	return &out, nil
}

const apiKeyColumns = `id, name, role, key_hash, created_at, last_used_at, revoked_at`

func scanAPIKey(row scanner) (*store.APIKey, error) {
	var (
		k                 store.APIKey
		created           string
		lastUsed, revoked sql.NullString
	)
	if err := row.Scan(&k.ID, &k.Name, &k.Role, &k.KeyHash, &created, &lastUsed, &revoked); err != nil {
		return nil, interpretError(err)
	}
	k.CreatedAt, k.LastUsedAt, k.RevokedAt = parseTime(created), nullTime(lastUsed), nullTime(revoked)
	return &k, nil
}

// APIKeyGetByHash looks a key up by hash.
func (db *DB) APIKeyGetByHash(ctx context.Context, hash string) (*store.APIKey, error) {
	k, err := scanAPIKey(db.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL`, hash))
	if err != nil {
		return nil, fmt.Errorf("api key: %w", err)
	}
	return k, nil
}

// APIKeyList lists every key, oldest first.
func (db *DB) APIKeyList(ctx context.Context) ([]*store.APIKey, error) {
	out, err := queryAll(ctx, db.r, scanAPIKey, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("api key list: %w", err)
	}
	return out, nil
}

// APIKeyRevoke sets revoked_at once.
func (db *DB) APIKeyRevoke(ctx context.Context, id string, now time.Time) (*store.APIKey, error) {
	var k *store.APIKey
	err := db.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		k, err = scanAPIKey(tx.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?
			RETURNING `+apiKeyColumns, formatTime(now), id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("api key revoke %s: %w", id, err)
	}
	return k, nil
}
