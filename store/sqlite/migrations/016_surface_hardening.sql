-- Who created a session (SPEC §3, agent tracking): the creating identity as
-- auth names it ("user:<id>", "key:<id>"), empty for sessions minted by the
-- Slack bridge, the engine or the internal key. Only that identity (or an
-- admin) may stamp the session through X-Holdfast-Session. Sessions created
-- before this column existed have no recorded creator: admins only.
ALTER TABLE sessions ADD COLUMN created_by TEXT NOT NULL DEFAULT '';

-- Failed console sign-ins (SPEC §7 throttles), one fixed window per key:
-- the console decides the keys and limits, the table only counts. It lives
-- in the database so that every replica sees the same counts (SPEC §9).
CREATE TABLE sign_in_failures (
    key          TEXT PRIMARY KEY,
    failures     INTEGER NOT NULL,
    window_start TEXT NOT NULL
);
CREATE INDEX sign_in_failures_window ON sign_in_failures (window_start);
