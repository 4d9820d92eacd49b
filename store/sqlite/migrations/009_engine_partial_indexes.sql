-- Recovery and resume only ever look at running runs and at approved
-- suspended runs. Partial indexes hold just those rows, so the thousands of
-- settled runs cost these indexes nothing on insert or settle (the composite
-- indexes of 007 were rewritten on every run's settle). Queries name them
-- with INDEXED BY, since without statistics SQLite prefers the status index.
DROP INDEX runs_status_heartbeat;
DROP INDEX runs_status_decision;
CREATE INDEX runs_stuck ON workflow_runs (heartbeat_at) WHERE status = 'running';
CREATE INDEX runs_approved ON workflow_runs (updated_at) WHERE status = 'suspended' AND decision = 'approved';
