-- Runs: durable timers and waits, the read model of runs and step logs, dead-lettered
-- runs with their journal, per-workflow state, and workflow controls (pause/halt).

-- Durable timers: retry backoffs, delays and wait timeouts. The worker that owns the
-- run's partition fires them; a fired timer's row is deleted after its event is produced.
CREATE TABLE timers (
    timer_key      text PRIMARY KEY,           -- run_id:path:visit:attempt:purpose
    run_id         text        NOT NULL,
    partition_key  text        NOT NULL,       -- the Kafka key of the run's events
    kafka_partition integer    NOT NULL,
    path           text        NOT NULL,
    visit          integer     NOT NULL,
    attempt        integer     NOT NULL,
    purpose        text        NOT NULL CHECK (purpose IN ('retry', 'delay', 'wait_timeout')),
    due_at         timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX timers_due ON timers (kafka_partition, due_at);

-- Parked waits: one row per waiting step; resolved once (resolved_at), deleted when the
-- run has taken the answer.
CREATE TABLE waits (
    wait_id        text PRIMARY KEY,           -- the step's idempotency key
    run_id         text        NOT NULL,
    workflow       text        NOT NULL,
    path           text        NOT NULL,
    partition_key  text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('approval', 'webhook', 'event')),
    spec           jsonb       NOT NULL,
    timeout_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at    timestamptz,
    resolution     jsonb
);
CREATE INDEX waits_run ON waits (run_id);
CREATE INDEX waits_unreported ON waits (resolved_at) WHERE resolved_at IS NOT NULL;

-- The read model: one row per run, one per step (or iteration) visit.
CREATE TABLE runs (
    run_id         text PRIMARY KEY,
    workflow       text        NOT NULL,
    version        text        NOT NULL,
    trigger_key    text        NOT NULL,
    matrix         jsonb,
    group_key      text,
    status         text        NOT NULL,
    error_kind     text,
    error_message  text,
    trigger        jsonb,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    settled_at     timestamptz
);
CREATE INDEX runs_workflow_created ON runs (workflow, created_at DESC);
CREATE INDEX runs_status ON runs (status, created_at DESC);

CREATE TABLE step_logs (
    -- No foreign key to runs: a projection must never stall on the order in which
    -- journal entries of one run arrive; retention deletes both.
    run_id         text        NOT NULL,
    path           text        NOT NULL,
    visit          integer     NOT NULL DEFAULT 1,
    kind           text,
    status         text        NOT NULL,
    attempt        integer     NOT NULL DEFAULT 1,
    input          jsonb,
    output         jsonb,
    error_kind     text,
    error_message  text,
    started_at     timestamptz,
    settled_at     timestamptz,
    -- The run's journal order (steps settled by one decision share a timestamp).
    seq            bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, path, visit)
);

CREATE TABLE dead_runs (
    run_id         text PRIMARY KEY,
    workflow       text        NOT NULL,
    error_kind     text,
    error_message  text,
    journal        jsonb       NOT NULL,
    dead_at        timestamptz NOT NULL,
    retried_as     text
);

-- Durable per-workflow state (state_set, list_add, list_remove), applied once per
-- idempotency key.
CREATE TABLE workflow_state (
    workflow       text        NOT NULL,
    key            text        NOT NULL,
    value          jsonb       NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, key)
);

CREATE TABLE state_ops (
    op_key         text PRIMARY KEY,
    result         jsonb       NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now()
);

-- Operator and engine pauses. An operator's pause survives a circuit breaker reset.
CREATE TABLE workflow_controls (
    workflow       text PRIMARY KEY,
    paused         boolean     NOT NULL DEFAULT false,
    paused_by      text,
    reason         text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
