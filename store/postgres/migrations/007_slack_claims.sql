-- Claims of the Slack inbox and outbox (SPEC §9): replicas on one database
-- each claim a thread's oldest delivery or a queue's head for a while, so
-- one of them handles or sends it. holder is the claimant's runner id,
-- claim_seq counts the row's claims and fences their writes, claim_until is
-- when the claim lapses (on the inbox also when a failed delivery may be
-- tried again).
ALTER TABLE slack_inbox ADD COLUMN thread TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE slack_inbox ADD COLUMN holder TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE slack_inbox ADD COLUMN claim_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE slack_inbox ADD COLUMN claim_until TIMESTAMPTZ;
ALTER TABLE slack_inbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
-- Deliveries stored before threads were recorded are threads of their own.
UPDATE slack_inbox SET thread = 'key:' || key;
CREATE INDEX slack_inbox_pending_thread ON slack_inbox (thread, id) WHERE processed_at IS NULL;
-- The claim walks pending rows by thread; listing them by id walks the same
-- (small) partial index, so the id-only one would only cost every delivery
-- a second index write.
DROP INDEX slack_inbox_pending;

ALTER TABLE slack_outbox ADD COLUMN holder TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE slack_outbox ADD COLUMN claim_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE slack_outbox ADD COLUMN claim_until TIMESTAMPTZ;
