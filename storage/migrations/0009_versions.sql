-- Workflow versions: every deployed definition, content-addressed and immutable, and the
-- version each workflow's new runs start with. A run is pinned to the version it
-- started with (its state names it), so a deploy never changes a run in flight.
CREATE TABLE workflow_versions (
    version        text PRIMARY KEY,
    workflow       text        NOT NULL,
    definition     jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workflow_deployments (
    workflow       text PRIMARY KEY,
    version        text        NOT NULL REFERENCES workflow_versions (version),
    deployed_at    timestamptz NOT NULL DEFAULT now()
);
