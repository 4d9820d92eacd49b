-- SQLite's 025-026 in one step: memo tag filters, the Slack user-name cache
-- and thread backfills.

-- Tag filters of memo search (SPEC §4.1 `tag:<t>`): one row per tag of a
-- memo, carrying the memo's type, listing flag and update time, so that
-- `tag:brief since:7d` is one index range walked newest first, stopping at
-- its LIMIT. Tags compare as titles do (SQLite's NOCASE): the row holds the
-- tag under lower() in "C", which folds ASCII letters only, and so does the
-- query's side. Kept by triggers, as the full-text column is generated, so
-- every memo write keeps it current.
CREATE TABLE memo_tags (
    memo_id    TEXT COLLATE "C" NOT NULL REFERENCES memos (id) ON DELETE CASCADE,
    tag        TEXT COLLATE "C" NOT NULL,
    memo_type  TEXT COLLATE "C" NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    unlisted   BOOLEAN NOT NULL,
    PRIMARY KEY (memo_id, tag)
);
CREATE INDEX memo_tags_listing ON memo_tags (tag, memo_type, updated_at, memo_id) INCLUDE (unlisted);

CREATE FUNCTION memo_tags_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM memo_tags WHERE memo_id = OLD.id;
    END IF;
    INSERT INTO memo_tags (memo_id, tag, memo_type, updated_at, unlisted)
        SELECT NEW.id, lower((j #>> '{}') COLLATE "C"), NEW.memo_type, NEW.updated_at, NEW.unlisted
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(NEW.tags::jsonb) = 'array' THEN NEW.tags::jsonb ELSE '[]'::jsonb END) j
        WHERE jsonb_typeof(j) = 'string'
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER memo_tags_insert AFTER INSERT ON memos FOR EACH ROW EXECUTE FUNCTION memo_tags_sync();
CREATE TRIGGER memo_tags_update AFTER UPDATE OF tags, memo_type, updated_at, unlisted ON memos FOR EACH ROW EXECUTE FUNCTION memo_tags_sync();

INSERT INTO memo_tags (memo_id, tag, memo_type, updated_at, unlisted)
    SELECT m.id, lower((j #>> '{}') COLLATE "C"), m.memo_type, m.updated_at, m.unlisted
    FROM memos m, jsonb_array_elements(CASE WHEN jsonb_typeof(m.tags::jsonb) = 'array' THEN m.tags::jsonb ELSE '[]'::jsonb END) j
    WHERE jsonb_typeof(j) = 'string'
    ON CONFLICT DO NOTHING;

-- Slack users' names as users.info gave them, so transcripts and the
-- Thread load class name speakers without asking Slack for every message.
CREATE TABLE slack_users (
    id         TEXT COLLATE "C" PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    fetched_at TIMESTAMPTZ NOT NULL
);

-- Thread backfill (SPEC §5): a session bound by a mention inside a thread
-- that already had messages fetches them, a conversations.replies page at a
-- time. The cursor moves with each recorded page in the page's own
-- transaction, a compare-and-set on the cursor, so a rate limit, a crash or
-- a restart resumes the fetch where it stopped and no message is recorded
-- twice, however many replicas fetch.
CREATE TABLE slack_backfills (
    session_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    channel    TEXT COLLATE "C" NOT NULL,
    thread_ts  TEXT COLLATE "C" NOT NULL,
    before_ts  TEXT COLLATE "C" NOT NULL,
    cursor     TEXT COLLATE "C" NOT NULL DEFAULT '',
    done       BOOLEAN NOT NULL DEFAULT false,
    fetched    INTEGER NOT NULL DEFAULT 0,
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_at    TIMESTAMPTZ NOT NULL,
    last_error TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX slack_backfills_due ON slack_backfills (next_at, session_id) WHERE NOT done;
