-- Cancel requests and chat turns live in the database, so any process can
-- cancel a run or a turn another process is running: the runner's
-- heartbeat reads the request, and a turn's heartbeat proves its process is
-- alive (a stale one is taken over or interrupted by anyone).
ALTER TABLE workflow_runs ADD COLUMN cancel_requested TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN turn_heartbeat_at TEXT;
ALTER TABLE sessions ADD COLUMN turn_cancel TEXT NOT NULL DEFAULT '';
