-- Named leases (SPEC §9): the leader of replicas holds the 'leader' row
-- until expires_at and renews it; anyone may read who leads. One row per
-- name, taken and renewed by one compare-and-set upsert.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
) WITHOUT ROWID;
