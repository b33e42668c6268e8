-- The backlog and retries in the read model.
--
-- A firing has a row from the moment it is admitted: `pending` with why (`pending_reason`:
-- lane, rate_limit, paused, probe, matrix) and what it waits for, until it starts
-- (`started_at`); a started run parked in an approval, a wait or a delay is `waiting`,
-- with what it waits for. A retried run links to the run it continues (`retry_of`) and
-- that run to it (`retried_as`); a failed run that is not dead-lettered keeps its final
-- state (`final_state`, the dead-lettered ones have it in `dead_runs`) so it can be retried.
ALTER TABLE runs
    ADD COLUMN pending_reason text,
    ADD COLUMN waiting_for    text,
    ADD COLUMN started_at     timestamptz,
    ADD COLUMN retry_of       text,
    ADD COLUMN retried_as     text,
    ADD COLUMN final_state    jsonb;

UPDATE runs SET started_at = created_at;
