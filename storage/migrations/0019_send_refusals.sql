-- A send the relayer refused (its permissions, simulation, gas cap, budget or breaker
-- said no) leaves no row in `sends`: it took no nonce and signed nothing. Its answer is
-- kept here, per attempt, before it is given: a delivery of the same attempt again (after
-- a crash, or a rebalance) gets the same answer instead of being checked again, when the
-- budget may have room or the balance may suffice, and sending for a step that has
-- settled. A later attempt of the step (its retry policy) is checked anew.
CREATE TABLE send_refusals (
    send_key   text        NOT NULL,
    attempt    integer     NOT NULL,
    error      jsonb       NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (send_key, attempt)
);
