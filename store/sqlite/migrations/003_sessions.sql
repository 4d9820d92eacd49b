-- The posture a session started with (HOLDFAST_DEFAULT_POLICY, or the posture
-- in force at its fork point): what is effective before its first policy_set.
ALTER TABLE sessions ADD COLUMN base_policy TEXT NOT NULL DEFAULT '';
UPDATE sessions SET base_policy = policy;

-- Listing: one index range per origin in newest-activity order, so a page
-- reads about `limit` rows per origin whatever the table size. Partial: empty
-- sessions are never listed, so they cost the index nothing.
CREATE INDEX sessions_listing ON sessions (origin, last_active_at, id, archived) WHERE event_count > 0;

-- Newest event of one type: the policy_set in force at a fork point, the
-- latest compact_summary a chat turn starts from.
CREATE INDEX session_events_type ON session_events (session_id, type, ts);
