-- Holdfast on PostgreSQL: the schema SQLite reaches through its migrations
-- 001-017, in one step. Text compares byte-wise (COLLATE "C"), as SQLite's
-- BINARY does, so ids, tags and keyset cursors order the same on both
-- stores; case-insensitive names compare lower(x) under "C", which folds
-- ASCII letters only, as SQLite's NOCASE (store.NameMatchesMemo).
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE memos (
    id              TEXT COLLATE "C" PRIMARY KEY,
    title           TEXT COLLATE "C" NOT NULL,
    body            TEXT COLLATE "C" NOT NULL,
    memo_type       TEXT COLLATE "C" NOT NULL DEFAULT 'note',
    tags            TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    notes           TEXT COLLATE "C" NOT NULL DEFAULT '',
    unlisted        BOOLEAN NOT NULL DEFAULT false,
    content_version BIGINT NOT NULL DEFAULT 1,
    content_hash    TEXT COLLATE "C" NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    -- Full-text index: PostgreSQL's own, with the 'simple' configuration
    -- (no stemming, no stop words), as FTS5's unicode61 tokenizer. The body
    -- indexed is its first 200,000 characters: a tsvector is capped at
    -- 1 MB, which a 1 MiB body of distinct words could pass.
    search          TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', title), 'A') || setweight(to_tsvector('simple', left(body, 200000)), 'B')) STORED
);
CREATE INDEX memos_title ON memos (lower(title), updated_at);
CREATE INDEX memos_type_updated ON memos (memo_type, updated_at);
CREATE INDEX memos_updated ON memos (updated_at);
CREATE INDEX memos_search ON memos USING gin (search);

CREATE TABLE workflows (
    memo_id    TEXT COLLATE "C" PRIMARY KEY REFERENCES memos (id) ON DELETE CASCADE,
    command    TEXT COLLATE "C" UNIQUE,
    status     TEXT COLLATE "C" NOT NULL,
    summary    TEXT COLLATE "C" NOT NULL DEFAULT '',
    invoke     TEXT COLLATE "C" NOT NULL DEFAULT '',
    errors     TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    updated_at TIMESTAMPTZ NOT NULL,
    revision   BIGINT NOT NULL DEFAULT 0
);

-- The Gate and Hook names each workflow's last compile looked up; names
-- compare as titles do.
CREATE TABLE workflow_names (
    workflow_memo_id TEXT COLLATE "C" NOT NULL REFERENCES workflows (memo_id) ON DELETE CASCADE,
    name             TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX workflow_names_key ON workflow_names (workflow_memo_id, lower(name));
CREATE INDEX workflow_names_name ON workflow_names (lower(name), workflow_memo_id);

CREATE TABLE users (
    id            TEXT COLLATE "C" PRIMARY KEY,
    username      TEXT COLLATE "C" NOT NULL,
    password_hash TEXT COLLATE "C" NOT NULL,
    role          TEXT COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'steward', 'admin')),
    slack_user_id TEXT COLLATE "C" UNIQUE,
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX users_username ON users (lower(username));

CREATE TABLE api_keys (
    id           TEXT COLLATE "C" PRIMARY KEY,
    name         TEXT COLLATE "C" NOT NULL,
    role         TEXT COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'steward', 'admin')),
    key_hash     TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ
);

CREATE TABLE sessions (
    id                TEXT COLLATE "C" PRIMARY KEY,
    title             TEXT COLLATE "C" NOT NULL DEFAULT '',
    status            TEXT COLLATE "C" NOT NULL DEFAULT 'idle',
    done_reason       TEXT COLLATE "C" NOT NULL DEFAULT '',
    origin            TEXT COLLATE "C" NOT NULL,
    platform          TEXT COLLATE "C" NOT NULL DEFAULT '',
    tags              TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    context           TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    capabilities      TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    archived          BOOLEAN NOT NULL DEFAULT false,
    forked_from       TEXT COLLATE "C" NOT NULL DEFAULT '',
    policy            TEXT COLLATE "C" NOT NULL DEFAULT 'auto',
    base_policy       TEXT COLLATE "C" NOT NULL DEFAULT '',
    request_count     BIGINT NOT NULL DEFAULT 0,
    caller_user       TEXT COLLATE "C" NOT NULL DEFAULT '',
    caller_key_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_by        TEXT COLLATE "C" NOT NULL DEFAULT '',
    active_run_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
    turn_heartbeat_at TIMESTAMPTZ,
    turn_cancel       TEXT COLLATE "C" NOT NULL DEFAULT '',
    event_count       BIGINT NOT NULL DEFAULT 0,
    -- The ts of the session's newest event: the next one is strictly later,
    -- allocated by the one UPDATE that locks the session row.
    last_event_ts     TIMESTAMPTZ,
    last_active_at    TIMESTAMPTZ NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL
);
-- Listing: one index range per origin in newest-activity order; empty
-- sessions are never listed, so they cost the index nothing.
CREATE INDEX sessions_listing ON sessions (origin, last_active_at DESC, id DESC) WHERE event_count > 0;
-- Text filter of the listing: a trigram index over title and tags, for a
-- case-insensitive substring match (ILIKE).
CREATE INDEX sessions_search ON sessions USING gin ((title || ' ' || tags) gin_trgm_ops);
CREATE INDEX sessions_active_turn ON sessions (turn_heartbeat_at) WHERE active_run_id <> '';

CREATE TABLE session_tags (
    tag        TEXT COLLATE "C" PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE
);
CREATE INDEX session_tags_session ON session_tags (session_id);

CREATE TABLE session_events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ts         TIMESTAMPTZ NOT NULL,
    type       TEXT COLLATE "C" NOT NULL,
    actor      TEXT COLLATE "C" NOT NULL DEFAULT '',
    payload    TEXT COLLATE "C" NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX session_events_session_ts ON session_events (session_id, ts);
CREATE INDEX session_events_type ON session_events (session_id, type, ts);

CREATE TABLE workflow_queue_items (
    id               TEXT COLLATE "C" PRIMARY KEY,
    owner_uid        TEXT COLLATE "C" NOT NULL DEFAULT '',
    workflow_memo_id TEXT COLLATE "C" NOT NULL REFERENCES memos (id),
    command          TEXT COLLATE "C" NOT NULL DEFAULT '',
    dedupe_key       TEXT COLLATE "C" NOT NULL,
    payload          TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    status           TEXT COLLATE "C" NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'done', 'failed')),
    run_id           TEXT COLLATE "C" NOT NULL DEFAULT '',
    session_id       TEXT COLLATE "C" NOT NULL DEFAULT '',
    target_version   BIGINT NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL,
    claimed_at       TIMESTAMPTZ,
    settled_at       TIMESTAMPTZ,
    UNIQUE (workflow_memo_id, dedupe_key)
);
-- Claim order and the pending count: only pending rows are in this index.
CREATE INDEX queue_items_pending ON workflow_queue_items (created_at, id) WHERE status = 'pending';
CREATE INDEX queue_items_status ON workflow_queue_items (status);

CREATE TABLE workflow_runs (
    id                TEXT COLLATE "C" PRIMARY KEY,
    item_id           TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES workflow_queue_items (id),
    workflow_memo_id  TEXT COLLATE "C" NOT NULL,
    command           TEXT COLLATE "C" NOT NULL DEFAULT '',
    session_id        TEXT COLLATE "C" NOT NULL DEFAULT '',
    owner_uid         TEXT COLLATE "C" NOT NULL DEFAULT '',
    status            TEXT COLLATE "C" NOT NULL CHECK (status IN ('running', 'suspended', 'succeeded', 'failed', 'cancelled', 'recovery_exhausted')),
    manifest          TEXT COLLATE "C" NOT NULL DEFAULT 'null',
    steps             TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    state             TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    guards            TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    error_kind        TEXT COLLATE "C" NOT NULL DEFAULT '',
    error             TEXT COLLATE "C" NOT NULL DEFAULT '',
    hold_id           TEXT COLLATE "C" NOT NULL DEFAULT '',
    decision          TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_output    TEXT COLLATE "C",
    dispatch_memo_id  TEXT COLLATE "C" NOT NULL DEFAULT '',
    lease             BIGINT NOT NULL DEFAULT 1,
    runner_id         TEXT COLLATE "C" NOT NULL DEFAULT '',
    heartbeat_at      TIMESTAMPTZ NOT NULL,
    recovery_attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested  TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    finished_at       TIMESTAMPTZ
);
CREATE INDEX runs_status_created ON workflow_runs (status, created_at, id);
CREATE INDEX runs_created ON workflow_runs (created_at, id);
CREATE INDEX runs_session ON workflow_runs (session_id, status, created_at, id);
-- Recovery: running runs, stalest heartbeat first; resume: approved
-- suspended runs, oldest decision first.
CREATE INDEX runs_stuck ON workflow_runs (heartbeat_at) WHERE status = 'running';
CREATE INDEX runs_approved ON workflow_runs (updated_at) WHERE status = 'suspended' AND decision = 'approved';

CREATE TABLE holds (
    id                 TEXT COLLATE "C" PRIMARY KEY,
    run_id             TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES workflow_runs (id),
    item_id            TEXT COLLATE "C" NOT NULL DEFAULT '',
    session_id         TEXT COLLATE "C" NOT NULL DEFAULT '',
    owner_uid          TEXT COLLATE "C" NOT NULL DEFAULT '',
    command            TEXT COLLATE "C" NOT NULL DEFAULT '',
    workflow_name      TEXT COLLATE "C" NOT NULL DEFAULT '',
    gate_label         TEXT COLLATE "C" NOT NULL DEFAULT '',
    status             TEXT COLLATE "C" NOT NULL CHECK (status IN ('open', 'approved', 'rejected')),
    preview            TEXT COLLATE "C" NOT NULL DEFAULT '',
    output             TEXT COLLATE "C" NOT NULL DEFAULT '',
    approvals          TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    required_approvals INTEGER NOT NULL DEFAULT 1,
    self_approval      BOOLEAN NOT NULL DEFAULT false,
    decided_by         TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_via        TEXT COLLATE "C" NOT NULL DEFAULT '',
    decided_at         TIMESTAMPTZ,
    comment            TEXT COLLATE "C" NOT NULL DEFAULT '',
    edited_output      TEXT COLLATE "C",
    expires_at         TIMESTAMPTZ,
    on_timeout         TEXT COLLATE "C" NOT NULL DEFAULT 'reject',
    created_at         TIMESTAMPTZ NOT NULL
);
CREATE INDEX holds_status_created ON holds (status, created_at, id);
CREATE INDEX holds_created ON holds (created_at, id);
CREATE INDEX holds_session ON holds (session_id, status, created_at, id);
CREATE INDEX holds_expiry ON holds (expires_at) WHERE status = 'open' AND expires_at IS NOT NULL;

CREATE TABLE hold_decisions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hold_id    TEXT COLLATE "C" NOT NULL,
    run_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
    decision   TEXT COLLATE "C" NOT NULL,
    decided_by TEXT COLLATE "C" NOT NULL,
    via        TEXT COLLATE "C" NOT NULL DEFAULT '',
    comment    TEXT COLLATE "C" NOT NULL DEFAULT '',
    output     TEXT COLLATE "C",
    outcome    TEXT COLLATE "C" NOT NULL,
    reason     TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX hold_decisions_hold ON hold_decisions (hold_id, id);

CREATE TABLE slack_inbox (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key          TEXT COLLATE "C" NOT NULL UNIQUE,
    kind         TEXT COLLATE "C" NOT NULL,
    body         BYTEA NOT NULL,
    received_at  TIMESTAMPTZ NOT NULL,
    processed_at TIMESTAMPTZ,
    error        TEXT COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX slack_inbox_pending ON slack_inbox (id) WHERE processed_at IS NULL;

CREATE TABLE slack_outbox (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedupe_key   TEXT COLLATE "C" NOT NULL UNIQUE,
    queue        TEXT COLLATE "C" NOT NULL,
    method       TEXT COLLATE "C" NOT NULL,
    channel      TEXT COLLATE "C" NOT NULL,
    thread_ts    TEXT COLLATE "C" NOT NULL DEFAULT '',
    recipient    TEXT COLLATE "C" NOT NULL DEFAULT '',
    text         TEXT COLLATE "C" NOT NULL DEFAULT '',
    blocks       TEXT COLLATE "C" NOT NULL DEFAULT '',
    ref_key      TEXT COLLATE "C" NOT NULL DEFAULT '',
    status       TEXT COLLATE "C" NOT NULL DEFAULT 'pending',
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      TIMESTAMPTZ NOT NULL,
    last_error   TEXT COLLATE "C" NOT NULL DEFAULT '',
    sent_ts      TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at   TIMESTAMPTZ NOT NULL,
    sent_at      TIMESTAMPTZ,
    attempted_at TIMESTAMPTZ
);
CREATE INDEX slack_outbox_pending_queue ON slack_outbox (queue, id) WHERE status = 'pending';
CREATE INDEX slack_outbox_sent ON slack_outbox (created_at) WHERE status = 'sent';

CREATE TABLE slack_cursors (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BIGINT NOT NULL
);

CREATE TABLE console_sessions (
    id          TEXT COLLATE "C" PRIMARY KEY,
    secret_hash TEXT COLLATE "C" NOT NULL,
    user_id     TEXT COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token  TEXT COLLATE "C" NOT NULL,
    user_agent  TEXT COLLATE "C" NOT NULL DEFAULT '',
    ip          TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

CREATE TABLE sign_in_failures (
    key          TEXT COLLATE "C" PRIMARY KEY,
    failures     INTEGER NOT NULL,
    window_start TIMESTAMPTZ NOT NULL
);
CREATE INDEX sign_in_failures_window ON sign_in_failures (window_start);
