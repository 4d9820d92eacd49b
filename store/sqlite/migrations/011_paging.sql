-- Keyset paging of runs and holds: listings order by (created_at, id), the id
-- breaking ties between rows created in the same microsecond, and continue
-- strictly past the last row shown. With id in the index each page is a
-- range walk that stops after LIMIT rows, never a sort of the history.
DROP INDEX runs_status_created;
DROP INDEX runs_created;
CREATE INDEX runs_status_created ON workflow_runs (status, created_at, id);
CREATE INDEX runs_created ON workflow_runs (created_at, id);
DROP INDEX holds_status_created;
DROP INDEX holds_created;
CREATE INDEX holds_status_created ON holds (status, created_at, id);
CREATE INDEX holds_created ON holds (created_at, id);
