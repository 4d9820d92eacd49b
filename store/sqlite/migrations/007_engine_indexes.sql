-- Engine hot-path indexes. Without statistics SQLite preferred the plain
-- status indexes over 002's partial ones and sorted every pending row per
-- claim; composite (status, order-by) indexes serve each query directly.
DROP INDEX queue_items_pending;
DROP INDEX queue_items_status;
-- Claim order (oldest pending first), the pending count, counts by status.
CREATE INDEX queue_items_status ON workflow_queue_items (status, created_at, id);
DROP INDEX runs_stuck;
DROP INDEX runs_approved;
-- Recovery: running runs, stalest heartbeat first.
CREATE INDEX runs_status_heartbeat ON workflow_runs (status, heartbeat_at);
-- Resume: approved suspended runs, oldest decision first.
CREATE INDEX runs_status_decision ON workflow_runs (status, decision, updated_at);
DROP INDEX holds_expiry;
CREATE INDEX holds_status_expiry ON holds (status, expires_at);
