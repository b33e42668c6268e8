-- Deployments: each project source `rflow deploy` (or a worker, as it starts) published,
-- under an increasing id. The source is the YAML and ABI files as text, with `${VAR}`
-- unresolved: every worker loads it with its own environment, so no resolved secret is
-- stored. Workers follow the newest id; `versions` is what the publisher loaded (the
-- per-workflow versions, as in workflow_deployments).
CREATE TABLE deployments (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest         text        NOT NULL,
    source         jsonb       NOT NULL,
    versions       jsonb       NOT NULL,
    deployed_at    timestamptz NOT NULL DEFAULT now()
);

-- Which deployment each worker runs, and the newest one it could not load (with why),
-- reported by the worker when it changes and every few seconds (seen_at).
CREATE TABLE deployment_workers (
    worker         text PRIMARY KEY,
    app_id         text        NOT NULL,
    deployment     bigint,
    failed         bigint,
    error          text,
    started_at     timestamptz NOT NULL,
    seen_at        timestamptz NOT NULL DEFAULT now()
);
