-- Compile status follows the library (SPEC §4.1). workflow_names keeps the
-- Gate and Hook names each workflow's last compile looked up, so a memo
-- write finds every workflow naming the memo (by its id, or its title
-- before or after the write) and re-indexes them in its own transaction.
-- Rows are written with the workflow's index; workflows indexed before this
-- migration have none until the library re-indexes every workflow at start.
CREATE TABLE workflow_names (
    workflow_memo_id TEXT NOT NULL REFERENCES workflows (memo_id) ON DELETE CASCADE,
    name             TEXT NOT NULL COLLATE NOCASE,
    PRIMARY KEY (workflow_memo_id, name)
) WITHOUT ROWID;
CREATE INDEX workflow_names_name ON workflow_names (name, workflow_memo_id);

-- revision counts writes of a workflow's index row (its memo's writes,
-- re-indexes, status changes), so a re-index computed from a read can be
-- refused if the row moved meanwhile.
ALTER TABLE workflows ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
