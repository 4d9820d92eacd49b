-- SQLite's 022-024 in one step: the console's run filters, counts and
-- chart, memo provenance, hold filters and decided history, disabled users
-- and form drafts.

-- Runs of a workflow, in listing order per status.
CREATE INDEX runs_command ON workflow_runs (command, status, created_at, id);

-- Which run published a memo (its provenance): only runs that dispatched one.
CREATE INDEX runs_dispatch_memo ON workflow_runs (dispatch_memo_id, created_at, id) WHERE dispatch_memo_id <> '';

-- Text filter over a run's title and brief (its item's payload.title and
-- payload.brief): a trigram index for a case-insensitive substring match
-- (ILIKE), as sessions_search. Title and brief are joined by a control
-- character, which the store strips from search text, so a match never
-- spans the two. The payload is written once, with the item.
CREATE INDEX queue_items_search ON workflow_queue_items USING gin ((
    COALESCE(payload::jsonb ->> 'title', '') || E'\x1f' || COALESCE(payload::jsonb ->> 'brief', '')) gin_trgm_ops);

-- Counts kept as runs are written, so Home and the Runs page read a handful
-- of rows however long the history is: runs per (workflow, status), and runs
-- per (hour of creation, status). SQLite keeps one row per key; here every
-- replica writing runs of one workflow (or in one hour) would update that
-- one row and queue behind its lock until commit, so each key is striped
-- over 16 rows, a connection writing the stripe of its backend pid. A
-- stripe may go negative (a run counted in one stripe and moved from it in
-- another); reads sum the stripes.
CREATE TABLE run_counts (
    command TEXT COLLATE "C" NOT NULL,
    status  TEXT COLLATE "C" NOT NULL,
    stripe  SMALLINT NOT NULL,
    n       BIGINT NOT NULL,
    PRIMARY KEY (command, status, stripe)
);
CREATE TABLE run_hour_counts (
    hour   TIMESTAMPTZ NOT NULL, -- created_at cut to the hour, in UTC
    status TEXT COLLATE "C" NOT NULL,
    stripe SMALLINT NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (hour, status, stripe)
);
INSERT INTO run_counts (command, status, stripe, n) SELECT command, status, 0, COUNT(*) FROM workflow_runs GROUP BY command, status;
INSERT INTO run_hour_counts (hour, status, stripe, n)
    SELECT date_trunc('hour', created_at, 'UTC'), status, 0, COUNT(*) FROM workflow_runs GROUP BY 1, 2;

-- run_counts_add moves one run's counts: -1 for its old (command, status,
-- hour), +1 for its new one (either may be absent). Rows are written in key
-- order, so two writers moving runs between the same keys never deadlock.
CREATE FUNCTION run_counts_add(old_command TEXT, old_status TEXT, old_created TIMESTAMPTZ,
    new_command TEXT, new_status TEXT, new_created TIMESTAMPTZ) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO run_counts AS c (command, status, stripe, n)
        SELECT d.command, d.status, pg_backend_pid() % 16, SUM(d.n) FROM (VALUES
            (old_command COLLATE "C", old_status COLLATE "C", -1), (new_command, new_status, 1)) AS d (command, status, n)
        WHERE d.command IS NOT NULL GROUP BY d.command, d.status ORDER BY d.command, d.status
        ON CONFLICT (command, status, stripe) DO UPDATE SET n = c.n + excluded.n;
    INSERT INTO run_hour_counts AS c (hour, status, stripe, n)
        SELECT d.hour, d.status, pg_backend_pid() % 16, SUM(d.n) FROM (VALUES
            (date_trunc('hour', old_created, 'UTC'), old_status COLLATE "C", -1),
            (date_trunc('hour', new_created, 'UTC'), new_status, 1)) AS d (hour, status, n)
        WHERE d.hour IS NOT NULL GROUP BY d.hour, d.status ORDER BY d.hour, d.status
        ON CONFLICT (hour, status, stripe) DO UPDATE SET n = c.n + excluded.n;
$$;

CREATE FUNCTION run_counts_trigger() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM run_counts_add(NULL, NULL, NULL, NEW.command, NEW.status, NEW.created_at);
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM run_counts_add(OLD.command, OLD.status, OLD.created_at, NEW.command, NEW.status, NEW.created_at);
    ELSE
        PERFORM run_counts_add(OLD.command, OLD.status, OLD.created_at, NULL, NULL, NULL);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_counts_insert AFTER INSERT ON workflow_runs FOR EACH ROW EXECUTE FUNCTION run_counts_trigger();
-- Checkpoints and heartbeats leave the status as it is: WHEN skips them
-- without calling the function.
CREATE TRIGGER run_counts_update AFTER UPDATE OF status, command, created_at ON workflow_runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.command IS DISTINCT FROM NEW.command
        OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION run_counts_trigger();
CREATE TRIGGER run_counts_delete AFTER DELETE ON workflow_runs FOR EACH ROW EXECUTE FUNCTION run_counts_trigger();

-- The Holds page's filters (workflow, requester) over the open queue and the
-- decided history, and the history ordered by decision time: partial
-- indexes, each a bounded walk of its own range.
CREATE INDEX holds_open_command ON holds (command, created_at, id) WHERE status = 'open';
CREATE INDEX holds_open_owner ON holds (owner_uid, created_at, id) WHERE status = 'open';
CREATE INDEX holds_decided ON holds (decided_at, id) WHERE status <> 'open';
CREATE INDEX holds_decided_command ON holds (command, decided_at, id) WHERE status <> 'open';
CREATE INDEX holds_decided_owner ON holds (owner_uid, decided_at, id) WHERE status <> 'open';

-- Users an admin disables, and drafts a form keeps across a redirect; a
-- draft dies with its sign-in.
ALTER TABLE users ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE console_drafts (
    id         TEXT COLLATE "C" PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES console_sessions (id) ON DELETE CASCADE,
    body       TEXT COLLATE "C" NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX console_drafts_session ON console_drafts (session_id);
CREATE INDEX console_drafts_created ON console_drafts (created_at);
