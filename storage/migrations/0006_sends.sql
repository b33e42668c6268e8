-- Sends: the embedded relayer's durable record. A send's row, its nonce and its budget
-- reservations are written in one transaction, committed before anything is broadcast;
-- a send whose key exists is never signed again.

-- The next nonce of each signer on each network, owned by the worker that owns the
-- relayer's partition of the sends topic.
CREATE TABLE relayer_nonces (
    network        text   NOT NULL,
    address        text   NOT NULL,            -- the signer, lower-case hex
    next_nonce     bigint NOT NULL CHECK (next_nonce >= 0),
    PRIMARY KEY (network, address)
);

-- One row per send: a step's transaction (keyed by the step's idempotency key), or a
-- zero-value self-transfer that fills a nonce left by a dropped or expired send.
CREATE TABLE sends (
    send_key       text PRIMARY KEY,
    purpose        text   NOT NULL DEFAULT 'step' CHECK (purpose IN ('step', 'fill')),
    run_id         text,
    workflow       text,
    reply          jsonb,                      -- where the step's result goes
    network        text   NOT NULL,
    relayer        text   NOT NULL,
    address        text   NOT NULL,
    nonce          bigint NOT NULL,
    to_address     text   NOT NULL,
    value          numeric(78, 0) NOT NULL,
    data           bytea  NOT NULL,
    gas_limit      bigint NOT NULL,
    fee_cap        numeric(78, 0) NOT NULL,    -- the highest max_fee_per_gas a bump may reach
    status         text   NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'succeeded', 'reverted', 'dropped', 'expired', 'failed')),
    tx_hash        text   NOT NULL,            -- the latest signed attempt
    block_number   bigint,
    block_hash     text,
    gas_used       numeric(78, 0),
    effective_gas_price numeric(78, 0),
    error          jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    settled_at     timestamptz
);
CREATE UNIQUE INDEX sends_step_nonce ON sends (network, address, nonce) WHERE purpose = 'step';
CREATE INDEX sends_open ON sends (network, relayer) WHERE settled_at IS NULL;
CREATE INDEX sends_run ON sends (run_id);

-- Every signed transaction of a send: the first, and each gas bump (same nonce).
CREATE TABLE send_attempts (
    tx_hash        text PRIMARY KEY,
    send_key       text   NOT NULL REFERENCES sends ON DELETE CASCADE,
    nonce          bigint NOT NULL,
    max_fee_per_gas numeric(78, 0) NOT NULL,
    max_priority_fee_per_gas numeric(78, 0) NOT NULL,
    raw            bytea  NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX send_attempts_send ON send_attempts (send_key);

-- Budget reservations: one row per (budget, asset, send). Live ('reserved') rows and
-- 'spent' rows inside the window count against the cap; 'released' rows do not.
CREATE TABLE budget_reservations (
    budget         text   NOT NULL,
    asset          text   NOT NULL,            -- 'native', or a token symbol
    send_key       text   NOT NULL,
    amount         numeric(78, 0) NOT NULL CHECK (amount >= 0),
    status         text   NOT NULL DEFAULT 'reserved'
                   CHECK (status IN ('reserved', 'spent', 'released')),
    run_id         text,
    workflow       text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    settled_at     timestamptz,
    PRIMARY KEY (budget, asset, send_key)
);
CREATE INDEX budget_reservations_live ON budget_reservations (budget, asset) INCLUDE (amount)
    WHERE status = 'reserved';
CREATE INDEX budget_reservations_spent ON budget_reservations (budget, asset, created_at)
    INCLUDE (amount) WHERE status = 'spent';
CREATE INDEX budget_reservations_send ON budget_reservations (send_key);
CREATE INDEX budget_reservations_run ON budget_reservations (run_id);

-- The spend ledger: what each mined transaction cost in gas (receipt-derived) and the
-- native value it moved. max_gas_spend is checked against it.
CREATE TABLE native_spend (
    tx_hash        text PRIMARY KEY,
    send_key       text   NOT NULL,
    network        text   NOT NULL,
    relayer        text   NOT NULL,
    gas_used       numeric(78, 0) NOT NULL,
    effective_gas_price numeric(78, 0) NOT NULL,
    gas_cost       numeric(78, 0) NOT NULL,    -- gas_used x effective_gas_price
    value          numeric(78, 0) NOT NULL,    -- native value moved (0 when reverted)
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX native_spend_window ON native_spend (network, relayer, recorded_at);
