-- SQLite's 018-021 in one step: trace context (SPEC §10), run usage, runs
-- held more than once, and the partial indexes of the edges report.
ALTER TABLE workflow_queue_items ADD COLUMN trace_context TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE slack_outbox ADD COLUMN trace_context TEXT COLLATE "C" NOT NULL DEFAULT '';

-- Usage: each run records its model and token totals. The listing sums runs
-- in its window straight from this partial index (only runs that used
-- tokens enter it). SQLite keeps hourly sums maintained by a trigger
-- instead; here that would make every replica settling runs of one workflow
-- update the same few rows, serialising them.
ALTER TABLE workflow_runs ADD COLUMN model TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE workflow_runs ADD COLUMN tokens_in BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN tokens_out BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_usage ON workflow_runs (created_at) INCLUDE (command, session_id, model, tokens_in, tokens_out)
    WHERE tokens_in + tokens_out > 0;

-- A run may be held more than once (a Token budget hold, then its output's
-- review).
ALTER TABLE holds DROP CONSTRAINT holds_run_id_key;
CREATE INDEX holds_run ON holds (run_id);

-- Edges of understanding: each partial index holds only the rows the report
-- counts, so the hot paths never pay for them.
CREATE INDEX holds_timed_out ON holds (decided_at) WHERE decided_via = 'timeout';
CREATE INDEX runs_failed ON workflow_runs (error_kind, finished_at) WHERE status IN ('failed', 'recovery_exhausted');
CREATE INDEX hold_decisions_refused ON hold_decisions (created_at) WHERE outcome = 'refused';
CREATE INDEX slack_inbox_errors ON slack_inbox (received_at) WHERE error <> '';
CREATE INDEX session_events_turn_errors ON session_events (ts)
    WHERE type = 'assistant_message' AND (payload::jsonb -> 'error') = 'true'::jsonb;
CREATE INDEX workflows_broken ON workflows (updated_at) WHERE errors <> '[]';
