-- sessions_search (013) without the engine's random tags: a session the
-- engine mints for a queue item is tagged workflow:<item id>, a tag nobody
-- types into the text filter (the item's session is resolved by that tag,
-- exactly, through session_tags) whose ~35 random trigrams were most of the
-- index's writes per enqueue. Such a tag is indexed as its kind alone,
-- "workflow:", so a search for "workflow" still finds those sessions; every
-- other tag, and every session without such a tag, is indexed exactly as
-- before. The listing's short-query scan (sessionListQuery) applies the same
-- expression (searchTagsSQL), so both paths agree. Keys and re-keying as 013.
DROP TRIGGER sessions_search_insert;
DROP TRIGGER sessions_search_delete;
DROP TRIGGER sessions_search_update;
DROP TABLE sessions_search;
CREATE VIRTUAL TABLE sessions_search USING fts5 (title, tags, content = '', tokenize = 'trigram');
INSERT INTO sessions_search (rowid, title, tags)
    SELECT ((1 << 30) - CAST(strftime('%s', substr(last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | rowid, title, CASE WHEN instr(tags, '"workflow:itm_') = 0 THEN tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(tags)) END FROM sessions;
CREATE TRIGGER sessions_search_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES (((1 << 30) - CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, CASE WHEN instr(new.tags, '"workflow:itm_') = 0 THEN new.tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(new.tags)) END);
END;
CREATE TRIGGER sessions_search_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', ((1 << 30) - CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, CASE WHEN instr(old.tags, '"workflow:itm_') = 0 THEN old.tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(old.tags)) END);
END;
CREATE TRIGGER sessions_search_update AFTER UPDATE OF title, tags, last_active_at ON sessions
WHEN new.title IS NOT old.title OR new.tags IS NOT old.tags OR substr(new.last_active_at, 1, 16) IS NOT substr(old.last_active_at, 1, 16) BEGIN
    INSERT INTO sessions_search (sessions_search, rowid, title, tags)
        VALUES ('delete', ((1 << 30) - CAST(strftime('%s', substr(old.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | old.rowid, old.title, CASE WHEN instr(old.tags, '"workflow:itm_') = 0 THEN old.tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(old.tags)) END);
    INSERT INTO sessions_search (rowid, title, tags)
        VALUES (((1 << 30) - CAST(strftime('%s', substr(new.last_active_at, 1, 16) || ':00') AS INTEGER) / 60) << 32 | new.rowid, new.title, CASE WHEN instr(new.tags, '"workflow:itm_') = 0 THEN new.tags ELSE (SELECT json_group_array(CASE WHEN value GLOB 'workflow:itm_*' THEN 'workflow:' ELSE value END) FROM json_each(new.tags)) END);
END;
