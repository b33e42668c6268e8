-- Webhook deliveries seen per idempotency key, shared by every worker's HTTP ingress.
--
-- A row is a claim on (workflow, idempotency key). 'pending': a worker is producing the
-- firing and has not answered yet; 'accepted': the firing is durably in Kafka and the
-- sender was told so. Each firing of a key is one generation; the trigger key carries
-- the generation, so a takeover that produces again under the same generation is
-- deduplicated downstream, and a delivery after the TTL starts a new run. Rows are
-- kept after they expire: the generation must keep counting up, because the trigger
-- keys of earlier generations are remembered downstream.

CREATE TABLE webhook_deliveries (
    workflow         text        NOT NULL,
    idempotency_key  text        NOT NULL,
    generation       integer     NOT NULL CHECK (generation >= 1),
    status           text        NOT NULL CHECK (status IN ('pending', 'accepted')),
    -- The worker request holding a pending claim; NULL once accepted or released.
    claim_id         uuid,
    -- When the pending claim was taken; NULL when released, so the sender's retry may
    -- take it over at once.
    claimed_at       timestamptz,
    accepted_at      timestamptz,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (workflow, idempotency_key)
);
