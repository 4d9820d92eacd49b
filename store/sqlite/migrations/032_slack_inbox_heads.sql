-- Each thread's head (its oldest unprocessed delivery, the only one a claim
-- may take) is marked, so a claim walks the heads in arrival order instead
-- of grouping every pending delivery by thread: with 20,000 deliveries
-- waiting the grouping cost ~12 ms a claim on the single writer, and a
-- backlog drained in quadratic time. head is 1 on exactly the oldest
-- pending delivery of each thread: set when a delivery arrives to a thread
-- with nothing pending, passed on to the next one when it is processed.
ALTER TABLE slack_inbox ADD COLUMN head INTEGER NOT NULL DEFAULT 0;
UPDATE slack_inbox SET head = 1
    WHERE id IN (SELECT MIN(id) FROM slack_inbox WHERE processed_at IS NULL GROUP BY thread);
CREATE INDEX slack_inbox_heads ON slack_inbox (id) WHERE head = 1;
