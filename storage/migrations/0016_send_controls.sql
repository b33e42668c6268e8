-- Pending sends under an operator's control.
--
-- A short id people can type (`s` and the first 12 hex digits of the sha256 of the send
-- key, as rflow.storage.sends.send_id computes it for new rows); the deadline of the
-- step's timeout, which the relayer enforces by cancelling the send; and `cancelled`, the
-- status of a send whose nonce a zero-value self-transfer took on purpose (an operator's
-- cancel, or the step's timeout).
ALTER TABLE sends ADD COLUMN send_id text;
UPDATE sends SET send_id = 's' || left(encode(sha256(convert_to(send_key, 'UTF8')), 'hex'), 12);
ALTER TABLE sends ALTER COLUMN send_id SET NOT NULL;
CREATE INDEX sends_send_id ON sends (send_id);
ALTER TABLE sends ADD COLUMN deadline timestamptz;
ALTER TABLE sends DROP CONSTRAINT sends_status_check;
ALTER TABLE sends ADD CONSTRAINT sends_status_check CHECK (
    status IN ('pending', 'succeeded', 'reverted', 'dropped', 'expired', 'cancelled', 'failed')
);

-- A speed-up or a cancel of a pending send, asked for by `rflow sends` or the HTTP API and
-- carried out by the worker that owns the send's signer. The asker writes the row, then
-- produces the request to the sends topic; the relayer takes it only while it is still
-- `requested`, storing the new signed attempt in the same transaction (`signed`), then
-- broadcasts it (`done`, with the node's answer). An asker that stops waiting marks it
-- `lapsed` first, so a late relayer can never carry out what was reported as not done.
CREATE TABLE send_controls (
    request_id     text PRIMARY KEY,
    send_key       text   NOT NULL REFERENCES sends ON DELETE CASCADE,
    action         text   NOT NULL CHECK (action IN ('speedup', 'cancel')),
    max_fee_per_gas numeric(78, 0),           -- asked for (speedup), else the relayer's
    max_priority_fee_per_gas numeric(78, 0),
    above_cap      boolean NOT NULL DEFAULT false,
    status         text   NOT NULL DEFAULT 'requested'
                   CHECK (status IN ('requested', 'signed', 'done', 'refused', 'lapsed')),
    tx_hash        text,                       -- the new attempt, or the replacing self-transfer
    answer         text,                       -- why it was refused, or the node's answer
    requested_at   timestamptz NOT NULL DEFAULT now(),
    answered_at    timestamptz
);
CREATE INDEX send_controls_send ON send_controls (send_key);
