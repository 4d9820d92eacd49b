-- Text filter of the session listing: a trigram index over title and tags, so
-- a substring search finds its few matches without walking every session.
CREATE VIRTUAL TABLE sessions_search USING fts5 (title, tags, content = 'sessions', content_rowid = 'rowid', tokenize = 'trigram');
INSERT INTO sessions_search (sessions_search) VALUES ('rebuild');
CREATE TRIGGER sessions_search_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO sessions_search (rowid, title, tags) VALUES (new.rowid, new.title, new.tags);
END;
CREATE TRIGGER sessions_search_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags) VALUES ('delete', old.rowid, old.title, old.tags);
END;
CREATE TRIGGER sessions_search_update AFTER UPDATE OF title, tags ON sessions BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags) VALUES ('delete', old.rowid, old.title, old.tags);
    INSERT INTO sessions_search (rowid, title, tags) VALUES (new.rowid, new.title, new.tags);
END;
