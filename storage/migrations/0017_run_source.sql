-- Where each run's firing came from (event, webhook, schedule or manual), for listing
-- and filtering runs by it. Runs projected before this column stay without one.
ALTER TABLE runs ADD COLUMN source text;
CREATE INDEX runs_source ON runs (source, created_at DESC);
