-- The first schema: dead letters (records that could not be processed).
-- Objects are created unqualified: the migrator sets search_path to the target schema.

CREATE TABLE dead_letters (
    id           bigserial PRIMARY KEY,
    topic        text        NOT NULL,
    "partition"  integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    record_key   text,
    reason       text        NOT NULL,
    raw          text        NOT NULL,
    failed_at    timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    -- A redelivered dead letter is the same row (at-least-once delivery is normal).
    CONSTRAINT dead_letters_origin UNIQUE (topic, "partition", "offset")
);

CREATE INDEX dead_letters_recorded_at ON dead_letters (recorded_at DESC);
