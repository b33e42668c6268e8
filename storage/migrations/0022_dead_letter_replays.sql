-- A dead letter produced back to its topic by a replay (`rflow dead-letters replay` or the
-- console's Replay): when, and where the record landed. A replay claims the row under its
-- lock and records this in the same transaction as it produces, so a dead letter is
-- replayed once.
ALTER TABLE dead_letters
    ADD COLUMN replayed_at        timestamptz,
    ADD COLUMN replayed_partition integer,
    ADD COLUMN replayed_offset    bigint;
