-- A run may now be held more than once: a Token budget hold (SPEC §10) before
-- the step after the model call that passed the budget, and later its
-- output's review. holds.run_id was UNIQUE, which SQLite cannot drop in
-- place, so the table is rebuilt with the same columns and a plain index on
-- run_id. (A migration that adds columns to holds must run before this one
-- and list them here, or run after it.)
CREATE TABLE holds_rebuilt (
    id                 TEXT PRIMARY KEY,
    run_id             TEXT NOT NULL REFERENCES workflow_runs (id),
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
INSERT INTO holds_rebuilt (id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status,
    preview, output, approvals, required_approvals, self_approval, decided_by, decided_via, decided_at, comment,
    edited_output, expires_at, on_timeout, created_at)
SELECT id, run_id, item_id, session_id, owner_uid, command, workflow_name, gate_label, status,
    preview, output, approvals, required_approvals, self_approval, decided_by, decided_via, decided_at, comment,
    edited_output, expires_at, on_timeout, created_at FROM holds;
DROP TABLE holds;
ALTER TABLE holds_rebuilt RENAME TO holds;

CREATE INDEX holds_run ON holds (run_id);
CREATE INDEX holds_session ON holds (session_id, status);
CREATE INDEX holds_status_expiry ON holds (status, expires_at);
CREATE INDEX holds_status_created ON holds (status, created_at, id);
CREATE INDEX holds_created ON holds (created_at, id);
-- Edges of understanding: holds the engine decided because nobody did.
CREATE INDEX holds_timed_out ON holds (decided_at) WHERE decided_via = 'timeout';
