-- Console: the Holds page's filters (workflow, requester) over the open queue
-- and the decided history, and the history ordered by decision time. Partial
-- indexes: the open ones hold only the (few) open holds, the decided ones only
-- decided holds, so each listing is a bounded walk of its own range. Queries
-- name the status condition literally so SQLite can use them.
CREATE INDEX holds_open_command ON holds (command, created_at, id) WHERE status = 'open';
CREATE INDEX holds_open_owner ON holds (owner_uid, created_at, id) WHERE status = 'open';
CREATE INDEX holds_decided ON holds (decided_at, id) WHERE status <> 'open';
CREATE INDEX holds_decided_command ON holds (command, decided_at, id) WHERE status <> 'open';
CREATE INDEX holds_decided_owner ON holds (owner_uid, decided_at, id) WHERE status <> 'open';
