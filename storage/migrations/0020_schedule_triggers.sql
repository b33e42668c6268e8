-- Several schedules per workflow, each with a cursor of its own under its trigger id
-- ('schedule' for a workflow's first schedule, the only one there was before).
ALTER TABLE schedule_cursors ADD COLUMN trigger text NOT NULL DEFAULT 'schedule';
ALTER TABLE schedule_cursors DROP CONSTRAINT schedule_cursors_pkey;
ALTER TABLE schedule_cursors ADD PRIMARY KEY (workflow, trigger);

-- Whether the schedule was firing when its cursor last moved. A disabled schedule (by
-- its definition's enabled: false or by an operator) passes its fire times over; found
-- firing again, it starts from then and never catches up what it skipped.
ALTER TABLE schedule_cursors ADD COLUMN firing boolean NOT NULL DEFAULT true;
-- The latest fire time produced (the cursor also moves past the times it passes over).
ALTER TABLE schedule_cursors ADD COLUMN last_fired timestamptz;

-- Schedules an operator disabled (rflow schedules disable); enabling deletes the row.
CREATE TABLE schedule_controls (
    workflow     text        NOT NULL,
    trigger      text        NOT NULL,
    disabled_by  text        NOT NULL,
    reason       text,
    disabled_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, trigger)
);

-- A schedule's consecutive failures and last error are read from its runs, newest
-- settled first.
CREATE INDEX runs_settled_by_source ON runs (workflow, source, settled_at DESC)
    WHERE settled_at IS NOT NULL;
