-- Flow control: run starts deferred by a rate limit wait on durable timers, and durable
-- rate limits keep their fixed window here.

ALTER TABLE timers DROP CONSTRAINT timers_purpose_check;
ALTER TABLE timers ADD CONSTRAINT timers_purpose_check
    CHECK (purpose IN ('retry', 'delay', 'wait_timeout', 'start'));

-- One fixed window per workflow (rate_limit with durable: true): the first run start in
-- a window anchors it, and it releases `per` later. Claimed with one atomic statement.
CREATE TABLE rate_limit_buckets (
    workflow       text PRIMARY KEY,
    window_start   timestamptz NOT NULL,
    claims         integer     NOT NULL CHECK (claims >= 0)
);
