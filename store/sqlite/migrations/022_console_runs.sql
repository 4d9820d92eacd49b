-- Console: the Runs page's filters and counts, Home's counts and chart, and a
-- memo's provenance, each served by an index (SPEC §6, §7).

-- Runs of a workflow: (command, status) ranges in listing order. A listing of
-- one workflow across statuses merges one range per status, as the sessions
-- listing merges origins.
CREATE INDEX runs_command ON workflow_runs (command, status, created_at, id);

-- Which run published a memo (its provenance): only runs that dispatched one.
CREATE INDEX runs_dispatch_memo ON workflow_runs (dispatch_memo_id, created_at, id) WHERE dispatch_memo_id <> '';

-- Text filter over a run's title and brief (its item's payload.title and
-- payload.brief): a trigram index keyed like sessions_search (013), so matches
-- come out newest minute first. Key: ((1 << 30) - minute of created_at) << 32
-- | workflow_runs.rowid. A run's created_at and payload never change, so an
-- entry is written once, when the run is.
CREATE VIRTUAL TABLE runs_search USING fts5 (title, brief, content = '', contentless_delete = 1, tokenize = 'trigram');
INSERT INTO runs_search (rowid, title, brief)
    SELECT ((1 << 30) - CAST(strftime('%s', substr(r.created_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | r.rowid,
        COALESCE(json_extract(i.payload, '$.title'), ''), COALESCE(json_extract(i.payload, '$.brief'), '')
    FROM workflow_runs r JOIN workflow_queue_items i ON i.id = r.item_id;
CREATE TRIGGER runs_search_insert AFTER INSERT ON workflow_runs BEGIN
    INSERT INTO runs_search (rowid, title, brief)
        SELECT ((1 << 30) - CAST(strftime('%s', substr(new.created_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid,
            COALESCE(json_extract(i.payload, '$.title'), ''), COALESCE(json_extract(i.payload, '$.brief'), '')
        FROM workflow_queue_items i WHERE i.id = new.item_id;
END;
CREATE TRIGGER runs_search_delete AFTER DELETE ON workflow_runs BEGIN
    DELETE FROM runs_search
        WHERE rowid = ((1 << 30) - CAST(strftime('%s', substr(old.created_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid;
END;

-- Counts kept as runs are written, so Home and the Runs page read a handful of
-- rows however long the history is: runs per (workflow, status), and runs per
-- (hour of creation, status) for the last day's counts and chart.
CREATE TABLE run_counts (
    command TEXT NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (command, status)
) WITHOUT ROWID;
CREATE TABLE run_hour_counts (
    hour   TEXT NOT NULL, -- created_at cut to the hour: 2006-01-02T15
    status TEXT NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (hour, status)
) WITHOUT ROWID;
INSERT INTO run_counts (command, status, n) SELECT command, status, COUNT(*) FROM workflow_runs GROUP BY command, status;
INSERT INTO run_hour_counts (hour, status, n) SELECT substr(created_at, 1, 13), status, COUNT(*) FROM workflow_runs GROUP BY 1, 2;
CREATE TRIGGER run_counts_insert AFTER INSERT ON workflow_runs BEGIN
    INSERT INTO run_counts (command, status, n) VALUES (new.command, new.status, 1)
        ON CONFLICT (command, status) DO UPDATE SET n = n + 1;
    INSERT INTO run_hour_counts (hour, status, n) VALUES (substr(new.created_at, 1, 13), new.status, 1)
        ON CONFLICT (hour, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER run_counts_status AFTER UPDATE OF status ON workflow_runs WHEN new.status IS NOT old.status BEGIN
    UPDATE run_counts SET n = n - 1 WHERE command = old.command AND status = old.status;
    INSERT INTO run_counts (command, status, n) VALUES (new.command, new.status, 1)
        ON CONFLICT (command, status) DO UPDATE SET n = n + 1;
    UPDATE run_hour_counts SET n = n - 1 WHERE hour = substr(old.created_at, 1, 13) AND status = old.status;
    INSERT INTO run_hour_counts (hour, status, n) VALUES (substr(new.created_at, 1, 13), new.status, 1)
        ON CONFLICT (hour, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER run_counts_delete AFTER DELETE ON workflow_runs BEGIN
    UPDATE run_counts SET n = n - 1 WHERE command = old.command AND status = old.status;
    UPDATE run_hour_counts SET n = n - 1 WHERE hour = substr(old.created_at, 1, 13) AND status = old.status;
END;
