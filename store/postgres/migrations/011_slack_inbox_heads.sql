-- Each thread's head (its oldest unprocessed delivery, the only one a claim
-- may take) is marked, so a claim walks the heads in arrival order instead
-- of grouping every pending delivery by thread (8 ms a claim with 200
-- deliveries waiting, more with every one). head is true on exactly the
-- oldest pending delivery of each thread: set when a delivery arrives to a
-- thread with nothing pending, passed on to the next one when it is
-- processed, both under the thread's advisory lock (see lockThreadsTx).
ALTER TABLE slack_inbox ADD COLUMN head BOOLEAN NOT NULL DEFAULT false;
UPDATE slack_inbox SET head = true
    WHERE id IN (SELECT MIN(id) FROM slack_inbox WHERE processed_at IS NULL GROUP BY thread);
CREATE INDEX slack_inbox_heads ON slack_inbox (id) WHERE head;
