-- Text filter of the session listing, keyed by activity: each session's
-- trigram entry has rowid (minute of last activity) << 32 | sessions.rowid, so
-- the matches of a query come out of the index newest minute first and a page
-- reads about `limit` matches plus one minute's worth, however many sessions
-- match and however old they are. The entry is re-keyed only when a session's
-- activity crosses into a new minute (or its title or tags change), so event
-- appends stay cheap. Contentless: queries use only MATCH and rowid.
DROP TRIGGER sessions_search_insert;
DROP TRIGGER sessions_search_delete;
DROP TRIGGER sessions_search_update;
DROP TABLE sessions_search;
CREATE VIRTUAL TABLE sessions_search USING fts5 (title, tags, content = '', tokenize = 'trigram');
INSERT INTO sessions_search (rowid, title, tags)
    SELECT (CAST(strftime('%s', substr(last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | rowid, title, tags FROM sessions;
CREATE TRIGGER sessions_search_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES ((CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, new.tags);
END;
CREATE TRIGGER sessions_search_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', (CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, old.tags);
END;
CREATE TRIGGER sessions_search_update AFTER UPDATE OF title, tags, last_active_at ON sessions
WHEN new.title IS NOT old.title OR new.tags IS NOT old.tags OR substr(new.last_active_at, 1, 16) IS NOT substr(old.last_active_at, 1, 16) BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', (CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, old.tags);
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES ((CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, new.tags);
END;
