-- The console's sessions, kept on the server: the browser's cookie holds only a random
-- id, and this table only its sha256 (`id_hash`), so a copy of the table signs nobody
-- in. `token_check` is an HMAC, keyed by the session's id, of the digest of the token
-- the principal signed in with: once that token is rotated the check fails and the
-- session ends. A session ends at `expires_at`, after an idle timeout since
-- `last_seen_at`, or when revoked (signed out, or its token rotated).
CREATE TABLE console_sessions (
    id_hash      bytea       PRIMARY KEY,
    principal    text        NOT NULL,
    token_check  bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    revoked_why  text
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
