-- The runs of one firing (each matrix combination, and their retries, share its trigger
-- key): the console lists them on a run's page.
CREATE INDEX runs_workflow_trigger_key ON runs (workflow, trigger_key);
