-- Console sign-in sessions: the cookie holds id.secret, only the secret's
-- hash is kept. Deleting a user signs them out everywhere.
CREATE TABLE console_sessions (
    id          TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    user_id     TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token  TEXT NOT NULL,
    user_agent  TEXT NOT NULL DEFAULT '',
    ip          TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
