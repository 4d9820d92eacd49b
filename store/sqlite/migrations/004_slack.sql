-- Slack bridge: durable inbox of raw deliveries, stored before the ack.
CREATE TABLE slack_inbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    key          TEXT NOT NULL UNIQUE,
    kind         TEXT NOT NULL,
    body         BLOB NOT NULL,
    received_at  TEXT NOT NULL,
    processed_at TEXT,
    error        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX slack_inbox_pending ON slack_inbox (id) WHERE processed_at IS NULL;

-- Durable outbox of every Slack write, in order per queue (one per thread).
CREATE TABLE slack_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key  TEXT NOT NULL UNIQUE,
    queue       TEXT NOT NULL,
    method      TEXT NOT NULL,
    channel     TEXT NOT NULL,
    thread_ts   TEXT NOT NULL DEFAULT '',
    user        TEXT NOT NULL DEFAULT '',
    text        TEXT NOT NULL DEFAULT '',
    blocks      TEXT NOT NULL DEFAULT '',
    ref_key     TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL DEFAULT 'pending',
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     TEXT NOT NULL,
    last_error  TEXT NOT NULL DEFAULT '',
    sent_ts     TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    sent_at     TEXT
);
CREATE INDEX slack_outbox_pending_queue ON slack_outbox (queue, id) WHERE status = 'pending';
CREATE INDEX slack_outbox_pending_next ON slack_outbox (next_at) WHERE status = 'pending';

-- Named cursors; "mirror" is the id of the last session event mirrored.
CREATE TABLE slack_cursors (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
