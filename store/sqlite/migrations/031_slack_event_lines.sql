-- The transcript lines SlackEventAppendOnce recorded, one per (Slack event,
-- session, type), so that a replayed delivery finds its line with one seek
-- instead of reading the payload of every line of that type in the session
-- (~30 ms per mention in a session of 100,000 events). Rows are kept as
-- the lines are: sessions and their transcripts are never deleted.
CREATE TABLE slack_event_lines (
    slack_event_id TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    type           TEXT NOT NULL,
    PRIMARY KEY (slack_event_id, session_id, type)
) WITHOUT ROWID;

-- Lines recorded before this migration.
INSERT OR IGNORE INTO slack_event_lines (slack_event_id, session_id, type)
    SELECT json_extract(payload, '$.slackEventId'), session_id, type FROM session_events
    WHERE json_valid(payload) AND json_extract(payload, '$.slackEventId') IS NOT NULL;
