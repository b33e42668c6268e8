-- Circuit breakers: one circuit per workflow with a circuit_breaker, so a restart does
-- not forget a tripped circuit.
CREATE TABLE circuit_state (
    workflow       text PRIMARY KEY,
    state          text        NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    failures       timestamptz[] NOT NULL DEFAULT '{}',
    probe_run_id   text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
