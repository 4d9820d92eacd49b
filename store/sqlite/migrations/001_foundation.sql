-- Memo library. rowid backs the FTS5 external-content index.
CREATE TABLE memos (
    rowid           INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    memo_type       TEXT NOT NULL DEFAULT 'note',
    tags            TEXT NOT NULL DEFAULT '[]',
    notes           TEXT NOT NULL DEFAULT '',
    unlisted        INTEGER NOT NULL DEFAULT 0,
    content_version INTEGER NOT NULL DEFAULT 1,
    content_hash    TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX memos_title ON memos (title COLLATE NOCASE, updated_at);
CREATE INDEX memos_type_updated ON memos (memo_type, updated_at);
CREATE INDEX memos_updated ON memos (updated_at);

CREATE VIRTUAL TABLE memos_fts USING fts5 (title, body, content = 'memos', content_rowid = 'rowid');
CREATE TRIGGER memos_fts_insert AFTER INSERT ON memos BEGIN
    INSERT INTO memos_fts (rowid, title, body) VALUES (new.rowid, new.title, new.body);
END;
CREATE TRIGGER memos_fts_delete AFTER DELETE ON memos BEGIN
    INSERT INTO memos_fts (memos_fts, rowid, title, body) VALUES ('delete', old.rowid, old.title, old.body);
END;
CREATE TRIGGER memos_fts_update AFTER UPDATE OF title, body ON memos BEGIN
    INSERT INTO memos_fts (memos_fts, rowid, title, body) VALUES ('delete', old.rowid, old.title, old.body);
    INSERT INTO memos_fts (rowid, title, body) VALUES (new.rowid, new.title, new.body);
END;

-- Workflow index: one row per workflow memo, written in the memo's transaction.
CREATE TABLE workflows (
    memo_id    TEXT PRIMARY KEY REFERENCES memos (id) ON DELETE CASCADE,
    command    TEXT UNIQUE,
    status     TEXT NOT NULL,
    summary    TEXT NOT NULL DEFAULT '',
    invoke     TEXT NOT NULL DEFAULT '',
    errors     TEXT NOT NULL DEFAULT '[]',
    updated_at TEXT NOT NULL
);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'steward', 'admin')),
    slack_user_id TEXT UNIQUE,
    created_at    TEXT NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('viewer', 'steward', 'admin')),
    key_hash     TEXT NOT NULL UNIQUE,
    created_at   TEXT NOT NULL,
    last_used_at TEXT
);

CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    title          TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL DEFAULT 'idle',
    done_reason    TEXT NOT NULL DEFAULT '',
    origin         TEXT NOT NULL,
    platform       TEXT NOT NULL DEFAULT '',
    tags           TEXT NOT NULL DEFAULT '[]',
    context        TEXT NOT NULL DEFAULT '{}',
    capabilities   TEXT NOT NULL DEFAULT '[]',
    archived       INTEGER NOT NULL DEFAULT 0,
    forked_from    TEXT NOT NULL DEFAULT '',
    policy         TEXT NOT NULL DEFAULT 'auto',
    request_count  INTEGER NOT NULL DEFAULT 0,
    caller_user    TEXT NOT NULL DEFAULT '',
    caller_key_id  TEXT NOT NULL DEFAULT '',
    active_run_id  TEXT NOT NULL DEFAULT '',
    event_count    INTEGER NOT NULL DEFAULT 0,
    last_active_at TEXT NOT NULL,
    created_at     TEXT NOT NULL
);

-- One row per tag: tags are unique across sessions.
CREATE TABLE session_tags (
    tag        TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE
);
CREATE INDEX session_tags_session ON session_tags (session_id);

CREATE TABLE session_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ts         TEXT NOT NULL,
    type       TEXT NOT NULL,
    actor      TEXT NOT NULL DEFAULT '',
    payload    TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX session_events_session_ts ON session_events (session_id, ts);
