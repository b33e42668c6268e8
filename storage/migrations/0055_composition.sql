-- Composition: waits for a signal and for a child run; where each step sits in the
-- blocks of its run (parallel, race, try); and the run that started a child run.

ALTER TABLE waits DROP CONSTRAINT waits_kind_check;
ALTER TABLE waits ADD CONSTRAINT waits_kind_check
    CHECK (kind IN ('approval', 'webhook', 'event', 'signal', 'child'));
-- A signal is delivered to the run's step waiting for its name.
CREATE INDEX waits_signals ON waits (run_id, (spec -> 'signal' ->> 'name'))
    WHERE kind = 'signal' AND resolved_at IS NULL;

-- A step inside a block: the block (or, for a compensation, the step it undoes), its
-- role there (branch, try, catch, compensate), and what the read model shows of a block
-- (a race's winner and the branches it cancelled, a try's compensations, a child run).
ALTER TABLE step_logs ADD COLUMN parent text;
ALTER TABLE step_logs ADD COLUMN role text;
ALTER TABLE step_logs ADD COLUMN detail jsonb;

-- A child run (call_workflow) and the run and step that started it.
ALTER TABLE runs ADD COLUMN parent_run_id text;
ALTER TABLE runs ADD COLUMN parent_step text;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
