-- Timestamped webhook signatures accepted, per workflow webhook (its claim scope), so a
-- delivery replayed within the tolerance is refused. A row may go once its expires_at
-- (the delivery's time plus the tolerance) has passed: from then the delivery's time is
-- outside the tolerance and refused for that.
CREATE TABLE webhook_signatures (
    scope       text        NOT NULL,
    signature   text        NOT NULL,
    -- The request that holds the signature; a request whose firing failed releases it
    -- (deletes the row), so the sender's retry of that delivery is taken.
    claim_id    uuid        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, signature)
);
CREATE INDEX webhook_signatures_expiry ON webhook_signatures (expires_at);
