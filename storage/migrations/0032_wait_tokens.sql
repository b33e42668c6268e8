-- Webhook waits are answered at a URL carrying a token of their own: an HMAC of the
-- wait's id under a random key made once per schema (`signing_keys`, purpose
-- 'wait_urls'), so no token can be computed from a trigger or a run id. The wait row
-- keeps only the token's sha256, which a request's token is hashed and looked up by.
CREATE TABLE signing_keys (
    purpose    text        PRIMARY KEY,
    key        bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE waits ADD COLUMN token_hash bytea;
CREATE UNIQUE INDEX waits_token ON waits (token_hash) WHERE token_hash IS NOT NULL;
