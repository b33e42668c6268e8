-- Chain-event ingress, per network: the recent canonical chain as the follower recorded
-- it (to see reorgs across restarts), how far events were emitted at each confirmation
-- depth, and which trigger keys were emitted from which block (to retract them when a
-- reorg replaces that block). Objects are unqualified: the migrator sets search_path.

-- The last few hundred headers; the highest row is the last processed block.
CREATE TABLE chain_blocks (
    network      text   NOT NULL,
    number       bigint NOT NULL,
    hash         text   NOT NULL,
    parent_hash  text   NOT NULL,
    "timestamp"  bigint NOT NULL,
    PRIMARY KEY (network, number)
);

-- One cursor per network and confirmation depth: events of blocks up to block_number
-- have been emitted for the triggers that wait that many confirmations. The chain id
-- and genesis hash tell a different or reset chain (a restarted dev node) from a node
-- that is merely behind.
CREATE TABLE chain_cursors (
    network        text        NOT NULL,
    confirmations  integer     NOT NULL CHECK (confirmations >= 0),
    chain_id       bigint      NOT NULL,
    genesis_hash   text        NOT NULL,
    block_number   bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (network, confirmations)
);

-- Written before the firing is produced, so a crash in between can still retract it.
CREATE TABLE chain_emissions (
    network       text        NOT NULL,
    workflow      text        NOT NULL,
    trigger_key   text        NOT NULL,
    "group"       text,
    block_number  bigint      NOT NULL,
    block_hash    text        NOT NULL,
    emitted_at    timestamptz NOT NULL DEFAULT now(),
    retracted_at  timestamptz,
    PRIMARY KEY (network, workflow, trigger_key)
);

CREATE INDEX chain_emissions_block ON chain_emissions (network, block_hash);
CREATE INDEX chain_emissions_number ON chain_emissions (network, block_number);
