-- When a post to Slack was first attempted (NULL: never). A message with an
-- attempt on record may be in Slack already (the process died before it
-- recorded the answer), so the bridge looks for it there before it posts it
-- again (SPEC §5, exactly once); the time bounds that search.
ALTER TABLE slack_outbox ADD COLUMN attempted_at TEXT;
