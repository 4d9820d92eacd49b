-- SQLite's 027 (Slack stewardship, issue 10). A hold's title says what is
-- being decided (SPEC §4.3); cards, the App Home and lists lead with it.
ALTER TABLE holds ADD COLUMN title TEXT COLLATE "C" NOT NULL DEFAULT '';
-- Reminders (Policy `Remind after`): the interval, how many were sent, and
-- when the next one is due (NULL: none, because the policy sets no interval
-- or the last one was sent). The engine's maintenance pass sends what is due
-- and moves remind_at in the same transaction as the reminder's transcript
-- line, so a restart neither loses nor repeats one.
ALTER TABLE holds ADD COLUMN remind_every_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN reminders_sent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN remind_at TIMESTAMPTZ;
CREATE INDEX holds_remind ON holds (remind_at, id) WHERE status = 'open' AND remind_at IS NOT NULL;
-- A Slack user's own recent runs, newest first (their App Home).
CREATE INDEX runs_owner_created ON workflow_runs (owner_uid, created_at, id);
