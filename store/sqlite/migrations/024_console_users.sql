-- Console: users an admin disables (they cannot sign in, and their sign-in
-- sessions stop working at once), and drafts a form keeps across a redirect
-- (a memo edit that lost a compare-and-set race is shown beside the current
-- version on a page that can be reloaded). A draft dies with its sign-in.
ALTER TABLE users ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
CREATE TABLE console_drafts (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES console_sessions (id) ON DELETE CASCADE,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX console_drafts_session ON console_drafts (session_id);
CREATE INDEX console_drafts_created ON console_drafts (created_at);
