-- A send whose fees would pass its step's max_fee_per_gas is not signed: it waits here,
-- with no nonce taken, until the base fee allows it (or its step's timeout runs out).
-- The relayer that owns its signer checks the base fee every few seconds and, when it
-- allows, hands the stored request back to the sends topic; the row goes once the send
-- is stored (signed) or refused. `request` is the SendRequest record as it came.
CREATE TABLE send_deferrals (
    send_key    text        NOT NULL,
    attempt     integer     NOT NULL,
    send_id     text        NOT NULL,
    run_id      text        NOT NULL,
    workflow    text        NOT NULL,
    path        text        NOT NULL,
    network     text        NOT NULL,
    relayer     text        NOT NULL,
    fee_cap     numeric(78, 0) NOT NULL,   -- the step's max_fee_per_gas
    reason      text        NOT NULL,
    request     bytea       NOT NULL,
    deadline    timestamptz,
    deferred_at timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz,               -- last handed back to the sends topic
    PRIMARY KEY (send_key, attempt)
);
CREATE INDEX send_deferrals_relayer ON send_deferrals (network, relayer);
CREATE INDEX send_deferrals_run ON send_deferrals (run_id);
