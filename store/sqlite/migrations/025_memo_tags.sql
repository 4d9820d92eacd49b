-- Tag filters of memo search (SPEC §4.1 `tag:<t>`): one row per tag of a
-- memo, compared as titles are (NOCASE), carrying the memo's type, listing
-- flag and update time so that `tag:brief since:7d` is one index range
-- walked newest first, stopping at its LIMIT, however many memos carry the
-- tag. Kept by triggers, as the full-text index is, so every memo write
-- (the API, the console, a dispatch) keeps it current.
CREATE TABLE memo_tags (
    memo_rowid INTEGER NOT NULL REFERENCES memos (rowid) ON DELETE CASCADE,
    tag        TEXT NOT NULL COLLATE NOCASE,
    memo_type  TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    unlisted   INTEGER NOT NULL,
    PRIMARY KEY (memo_rowid, tag)
) WITHOUT ROWID;
CREATE INDEX memo_tags_listing ON memo_tags (tag, memo_type, updated_at, unlisted);

INSERT OR IGNORE INTO memo_tags (memo_rowid, tag, memo_type, updated_at, unlisted)
    SELECT m.rowid, j.value, m.memo_type, m.updated_at, m.unlisted FROM memos m, json_each(m.tags) j WHERE j.type = 'text';

CREATE TRIGGER memo_tags_insert AFTER INSERT ON memos BEGIN
    INSERT OR IGNORE INTO memo_tags (memo_rowid, tag, memo_type, updated_at, unlisted)
        SELECT new.rowid, value, new.memo_type, new.updated_at, new.unlisted FROM json_each(new.tags) WHERE type = 'text';
END;
CREATE TRIGGER memo_tags_update AFTER UPDATE OF tags, memo_type, updated_at, unlisted ON memos BEGIN
    DELETE FROM memo_tags WHERE memo_rowid = old.rowid;
    INSERT OR IGNORE INTO memo_tags (memo_rowid, tag, memo_type, updated_at, unlisted)
        SELECT new.rowid, value, new.memo_type, new.updated_at, new.unlisted FROM json_each(new.tags) WHERE type = 'text';
END;
