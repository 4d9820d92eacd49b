-- A slash command's answer after its 3 seconds goes to the response_url
-- Slack gave with it: the one way to reach a user in a channel the bot
-- cannot post to.
ALTER TABLE slack_outbox ADD COLUMN response_url TEXT NOT NULL DEFAULT '';
