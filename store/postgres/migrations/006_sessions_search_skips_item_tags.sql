-- sessions_search without the engine's random tags: a session the engine
-- mints for a queue item is tagged workflow:<item id>, a tag nobody types
-- into the text filter (that session is resolved by the exact tag, through
-- session_tags), whose random trigrams were most of what every insert and
-- update of such a session wrote to this index. The tag is indexed as its
-- kind alone, "workflow:", so a search for "workflow" still finds those
-- sessions; every other tag is indexed as before. SessionList filters on
-- this same expression, so the index serves it.
DROP INDEX sessions_search;
CREATE INDEX sessions_search ON sessions USING gin
    ((title || ' ' || regexp_replace(tags, '"workflow:itm_[^"]*"', '"workflow:"', 'g')) gin_trgm_ops);
