-- A revoked API key answers 401 at once and stays listed, so what it did
-- is still named by its name.
ALTER TABLE api_keys ADD COLUMN revoked_at TEXT;
