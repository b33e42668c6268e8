-- Schedule cursors: per schedule-triggered workflow, the instant up to which its fire
-- times have been handled. A fire time at or before last_fire never fires again, which
-- is what lets several schedulers and restarts fire each time once.

CREATE TABLE schedule_cursors (
    workflow    text        PRIMARY KEY,
    -- The definition that last moved the cursor (a changed cron or time zone keeps the
    -- cursor: the new definition's fire times after it are due as usual).
    cron        text        NOT NULL,
    timezone    text        NOT NULL,
    last_fire   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
