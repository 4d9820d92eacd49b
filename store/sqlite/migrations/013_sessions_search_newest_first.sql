-- sessions_search (012) keyed newest minute first: rowid is
-- (2^30 - minute of last activity) << 32 | sessions.rowid. FTS5 walks a
-- doclist forwards far faster than backwards (a reverse walk of a common
-- trigram reads its whole doclist), so the newest matches must come first
-- in ascending rowid order. Same triggers as 012 otherwise: an entry is
-- re-keyed only when the session's activity enters a new minute or its title
-- or tags change.
DROP TRIGGER sessions_search_insert;
DROP TRIGGER sessions_search_delete;
DROP TRIGGER sessions_search_update;
DROP TABLE sessions_search;
CREATE VIRTUAL TABLE sessions_search USING fts5 (title, tags, content = '', tokenize = 'trigram');
INSERT INTO sessions_search (rowid, title, tags)
    SELECT ((1 << 30) - CAST(strftime('%s', substr(last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | rowid, title, tags FROM sessions;
CREATE TRIGGER sessions_search_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES (((1 << 30) - CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, new.tags);
END;
CREATE TRIGGER sessions_search_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', ((1 << 30) - CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, old.tags);
END;
CREATE TRIGGER sessions_search_update AFTER UPDATE OF title, tags, last_active_at ON sessions
WHEN new.title IS NOT old.title OR new.tags IS NOT old.tags OR substr(new.last_active_at, 1, 16) IS NOT substr(old.last_active_at, 1, 16) BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', ((1 << 30) - CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, old.tags);
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES (((1 << 30) - CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, new.tags);
END;
