-- SQLite's 031. The transcript lines SlackEventAppendOnce recorded, one per
-- (Slack event, session, type), so that a replayed delivery finds its line
-- with one index probe instead of reading the payload of every line of that
-- type in the session. Rows are kept as the lines are: sessions and their
-- transcripts are never deleted.
CREATE TABLE slack_event_lines (
    slack_event_id TEXT COLLATE "C" NOT NULL,
    session_id     TEXT COLLATE "C" NOT NULL,
    type           TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (slack_event_id, session_id, type)
);

-- Lines recorded before this migration (only they name a slackEventId).
INSERT INTO slack_event_lines (slack_event_id, session_id, type)
    SELECT DISTINCT payload::jsonb ->> 'slackEventId', session_id, type FROM session_events
    WHERE payload LIKE '%"slackEventId"%' AND payload::jsonb ->> 'slackEventId' IS NOT NULL
ON CONFLICT DO NOTHING;
