-- SQLite's 028. Named leases (SPEC §9): the leader of replicas holds the
-- 'leader' row until expires_at and renews it; anyone may read who leads.
-- One row per name, taken and renewed by one compare-and-set upsert. A row,
-- not an advisory lock: it survives a pooler that reassigns sessions.
CREATE TABLE leases (
    name        TEXT COLLATE "C" PRIMARY KEY,
    holder      TEXT COLLATE "C" NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
