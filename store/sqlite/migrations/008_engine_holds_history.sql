-- The holds history (all statuses, newest first) without a sort of every hold.
CREATE INDEX holds_created ON holds (created_at);
