-- Trace context (SPEC §10): the W3C traceparent of the span that enqueued an
-- item, so every execution of its run (first start, resume after a hold,
-- recovery after a crash) joins the trace of the Slack message or API call
-- that asked for it; and of the work that queued a Slack write, so its post
-- joins that trace too. Empty when tracing is off.
ALTER TABLE workflow_queue_items ADD COLUMN trace_context TEXT NOT NULL DEFAULT '';
ALTER TABLE slack_outbox ADD COLUMN trace_context TEXT NOT NULL DEFAULT '';
