-- Engine: queue items, runs, holds and the hold decision audit (SPEC §4.2-4.3).

CREATE TABLE workflow_queue_items (
    id               TEXT PRIMARY KEY,
    owner_uid        TEXT NOT NULL DEFAULT '',
    workflow_memo_id TEXT NOT NULL REFERENCES memos (id),
    command          TEXT NOT NULL DEFAULT '',
    dedupe_key       TEXT NOT NULL,
    payload          TEXT NOT NULL DEFAULT '{}',
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'done', 'failed')),
    run_id           TEXT NOT NULL DEFAULT '',
    session_id       TEXT NOT NULL DEFAULT '',
    target_version   INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    claimed_at       TEXT,
    settled_at       TEXT,
    UNIQUE (workflow_memo_id, dedupe_key)
);
-- Claim order and the pending count: only pending rows are in this index.
CREATE INDEX queue_items_pending ON workflow_queue_items (created_at, id) WHERE status = 'pending';
CREATE INDEX queue_items_status ON workflow_queue_items (status);

CREATE TABLE workflow_runs (
    id                TEXT PRIMARY KEY,
    item_id           TEXT NOT NULL UNIQUE REFERENCES workflow_queue_items (id),
    workflow_memo_id  TEXT NOT NULL,
    command           TEXT NOT NULL DEFAULT '',
    session_id        TEXT NOT NULL DEFAULT '',
    owner_uid         TEXT NOT NULL DEFAULT '',
    status            TEXT NOT NULL CHECK (status IN ('running', 'suspended', 'succeeded', 'failed', 'cancelled', 'recovery_exhausted')),
    manifest          TEXT NOT NULL DEFAULT 'null',
    steps             TEXT NOT NULL DEFAULT '[]',
    state             TEXT NOT NULL DEFAULT '{}',
    guards            TEXT NOT NULL DEFAULT '[]',
    error_kind        TEXT NOT NULL DEFAULT '',
    error             TEXT NOT NULL DEFAULT '',
    hold_id           TEXT NOT NULL DEFAULT '',
    decision          TEXT NOT NULL DEFAULT '',
    decided_output    TEXT,
    dispatch_memo_id  TEXT NOT NULL DEFAULT '',
    lease             INTEGER NOT NULL DEFAULT 1,
    runner_id         TEXT NOT NULL DEFAULT '',
    heartbeat_at      TEXT NOT NULL,
    recovery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    finished_at       TEXT
);
CREATE INDEX runs_status_created ON workflow_runs (status, created_at);
CREATE INDEX runs_created ON workflow_runs (created_at);
CREATE INDEX runs_session ON workflow_runs (session_id, status);
-- Recovery scans only running runs, stalest first.
CREATE INDEX runs_stuck ON workflow_runs (heartbeat_at) WHERE status = 'running';
-- Resume scans only approved suspended runs.
CREATE INDEX runs_approved ON workflow_runs (updated_at) WHERE status = 'suspended' AND decision = 'approved';

CREATE TABLE holds (
    id                 TEXT PRIMARY KEY,
    run_id             TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    item_id            TEXT NOT NULL DEFAULT '',
    session_id         TEXT NOT NULL DEFAULT '',
    owner_uid          TEXT NOT NULL DEFAULT '',
    command            TEXT NOT NULL DEFAULT '',
    workflow_name      TEXT NOT NULL DEFAULT '',
    gate_label         TEXT NOT NULL DEFAULT '',
    status             TEXT NOT NULL CHECK (status IN ('open', 'approved', 'rejected')),
    preview            TEXT NOT NULL DEFAULT '',
    output             TEXT NOT NULL DEFAULT '',
    approvals          TEXT NOT NULL DEFAULT '[]',
    required_approvals INTEGER NOT NULL DEFAULT 1,
    self_approval      INTEGER NOT NULL DEFAULT 0,
    decided_by         TEXT NOT NULL DEFAULT '',
    decided_via        TEXT NOT NULL DEFAULT '',
    decided_at         TEXT,
    comment            TEXT NOT NULL DEFAULT '',
    edited_output      TEXT,
    expires_at         TEXT,
    on_timeout         TEXT NOT NULL DEFAULT 'reject',
    created_at         TEXT NOT NULL
);
CREATE INDEX holds_status_created ON holds (status, created_at);
CREATE INDEX holds_session ON holds (session_id, status);
CREATE INDEX holds_expiry ON holds (expires_at) WHERE status = 'open' AND expires_at IS NOT NULL;

-- Every decision attempt, accepted or refused.
CREATE TABLE hold_decisions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    hold_id    TEXT NOT NULL,
    run_id     TEXT NOT NULL DEFAULT '',
    decision   TEXT NOT NULL,
    decided_by TEXT NOT NULL,
    via        TEXT NOT NULL DEFAULT '',
    comment    TEXT NOT NULL DEFAULT '',
    output     TEXT,
    outcome    TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE INDEX hold_decisions_hold ON hold_decisions (hold_id, id);
