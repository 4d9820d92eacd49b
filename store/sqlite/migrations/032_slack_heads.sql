-- Each thread's head in the inbox (its oldest unprocessed delivery) and
-- each queue's head in the outbox (its oldest pending message), the only
-- rows a claim may take, are marked, so a claim walks the heads in arrival
-- order instead of grouping every pending row by thread: with 20,000 rows
-- waiting the grouping cost ~12 ms a claim on the single writer, and a
-- backlog drained in quadratic time. head is 1 on exactly the oldest
-- pending row of each thread or queue: set when a row arrives to a thread
-- with nothing pending, passed on to the next one when it leaves pending.
ALTER TABLE slack_inbox ADD COLUMN head INTEGER NOT NULL DEFAULT 0;
UPDATE slack_inbox SET head = 1
    WHERE id IN (SELECT MIN(id) FROM slack_inbox WHERE processed_at IS NULL GROUP BY thread);
CREATE INDEX slack_inbox_heads ON slack_inbox (id) WHERE head = 1;

ALTER TABLE slack_outbox ADD COLUMN head INTEGER NOT NULL DEFAULT 0;
UPDATE slack_outbox SET head = 1
    WHERE id IN (SELECT MIN(id) FROM slack_outbox WHERE status = 'pending' GROUP BY queue);
CREATE INDEX slack_outbox_heads ON slack_outbox (id) WHERE head = 1;
