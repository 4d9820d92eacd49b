-- Usage (SPEC §10): each run records the model its calls use and the tokens
-- in and out summed over its steps; usage_hourly keeps those sums per hour
-- of the runs' creation, per workflow command, per session and per model, so
-- a usage listing reads a few rows an hour, not every run. A trigger keeps
-- it: whichever write changes a run's tokens adds the difference, and a run
-- counts once, when it first records tokens.

ALTER TABLE workflow_runs ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE workflow_runs ADD COLUMN tokens_in INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN tokens_out INTEGER NOT NULL DEFAULT 0;

-- Runs recorded before this migration: their steps hold the tokens and
-- their manifest the model ("" when the workflow left it to the default).
UPDATE workflow_runs SET
    tokens_in  = COALESCE((SELECT SUM(json_extract(value, '$.tokensIn')) FROM json_each(steps)), 0),
    tokens_out = COALESCE((SELECT SUM(json_extract(value, '$.tokensOut')) FROM json_each(steps)), 0),
    model      = COALESCE(json_extract(manifest, '$.policy.model'), '')
WHERE json_valid(steps) AND json_valid(manifest);

CREATE TABLE usage_hourly (
    dimension  TEXT NOT NULL CHECK (dimension IN ('workflow', 'session', 'model')),
    hour       TEXT NOT NULL, -- 'YYYY-MM-DDTHH' (UTC) of the runs' creation
    key        TEXT NOT NULL,
    runs       INTEGER NOT NULL DEFAULT 0,
    tokens_in  INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dimension, hour, key)
) WITHOUT ROWID;

INSERT INTO usage_hourly (dimension, hour, key, runs, tokens_in, tokens_out)
    SELECT 'workflow', substr(created_at, 1, 13), command, COUNT(*), SUM(tokens_in), SUM(tokens_out)
        FROM workflow_runs WHERE tokens_in + tokens_out > 0 GROUP BY 2, 3
    UNION ALL
    SELECT 'session', substr(created_at, 1, 13), session_id, COUNT(*), SUM(tokens_in), SUM(tokens_out)
        FROM workflow_runs WHERE tokens_in + tokens_out > 0 GROUP BY 2, 3
    UNION ALL
    SELECT 'model', substr(created_at, 1, 13), model, COUNT(*), SUM(tokens_in), SUM(tokens_out)
        FROM workflow_runs WHERE tokens_in + tokens_out > 0 GROUP BY 2, 3;

CREATE TRIGGER workflow_runs_usage AFTER UPDATE OF tokens_in, tokens_out ON workflow_runs
WHEN NEW.tokens_in <> OLD.tokens_in OR NEW.tokens_out <> OLD.tokens_out
BEGIN
    INSERT INTO usage_hourly (dimension, hour, key, runs, tokens_in, tokens_out) VALUES
        ('workflow', substr(NEW.created_at, 1, 13), NEW.command, OLD.tokens_in + OLD.tokens_out = 0,
            NEW.tokens_in - OLD.tokens_in, NEW.tokens_out - OLD.tokens_out),
        ('session', substr(NEW.created_at, 1, 13), NEW.session_id, OLD.tokens_in + OLD.tokens_out = 0,
            NEW.tokens_in - OLD.tokens_in, NEW.tokens_out - OLD.tokens_out),
        ('model', substr(NEW.created_at, 1, 13), NEW.model, OLD.tokens_in + OLD.tokens_out = 0,
            NEW.tokens_in - OLD.tokens_in, NEW.tokens_out - OLD.tokens_out)
    ON CONFLICT (dimension, hour, key) DO UPDATE SET runs = runs + excluded.runs,
        tokens_in = tokens_in + excluded.tokens_in, tokens_out = tokens_out + excluded.tokens_out;
END;
