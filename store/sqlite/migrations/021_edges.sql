-- Edges of understanding (SPEC §10) read what is already recorded; these
-- partial indexes hold only the rows the report counts, so they cost the hot
-- paths nothing (a succeeded run, an accepted decision, a handled delivery
-- and an ordinary reply never enter them) and the report reads a window of
-- each without touching the rest.
CREATE INDEX runs_failed ON workflow_runs (error_kind, finished_at) WHERE status IN ('failed', 'recovery_exhausted');
CREATE INDEX hold_decisions_refused ON hold_decisions (created_at) WHERE outcome = 'refused';
CREATE INDEX slack_inbox_errors ON slack_inbox (received_at) WHERE error <> '';
CREATE INDEX session_events_turn_errors ON session_events (ts)
    WHERE type = 'assistant_message' AND json_extract(payload, '$.error') = 1;
CREATE INDEX workflows_broken ON workflows (updated_at) WHERE errors <> '[]';
