-- The outbox is polled through its per-queue heads (slack_outbox_pending_queue);
-- this index served an earlier query and only slowed every outbox write.
DROP INDEX IF EXISTS slack_outbox_pending_next;
