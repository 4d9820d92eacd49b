-- Slack users' names as users.info gave them, so transcripts and the
-- Thread load class name speakers without asking Slack for every message.
CREATE TABLE slack_users (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    fetched_at TEXT NOT NULL
) WITHOUT ROWID;

-- Thread backfill (SPEC §5): a session bound by a mention inside a thread
-- that already had messages fetches them, a conversations.replies page at a
-- time. The cursor moves with each recorded page in the page's own
-- transaction, so a rate limit, a crash or a restart resumes the fetch
-- where it stopped and no message is recorded twice.
CREATE TABLE slack_backfills (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    channel    TEXT NOT NULL,
    thread_ts  TEXT NOT NULL,
    before_ts  TEXT NOT NULL,
    cursor     TEXT NOT NULL DEFAULT '',
    done       INTEGER NOT NULL DEFAULT 0,
    fetched    INTEGER NOT NULL DEFAULT 0,
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_at    TEXT NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX slack_backfills_due ON slack_backfills (next_at) WHERE done = 0;
