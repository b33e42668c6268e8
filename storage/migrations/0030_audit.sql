-- The audit trail: one row per operator action taken (and per attempt refused), never
-- changed or removed. `principal` and `role` as they were when the action was asked for;
-- `target_kind`/`target_id` what it was taken on (a run, a send, a workflow, a schedule,
-- a dead letter, a deployment); `arguments` the request's fields the action's row of
-- rflow.authz.ACTIONS lists (never free input or a secret); `outcome` done, failed (the
-- action's own checks refused it, `reason` says why) or refused (the principal may not,
-- `reason` says why); `via` the api, the console or the cli.
CREATE TABLE audit_log (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    principal   text        NOT NULL,
    role        text,
    action      text        NOT NULL,
    target_kind text,
    target_id   text,
    arguments   jsonb       NOT NULL DEFAULT '{}',
    outcome     text        NOT NULL CHECK (outcome IN ('done', 'failed', 'refused')),
    reason      text,
    via         text        NOT NULL CHECK (via IN ('api', 'console', 'cli'))
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_principal ON audit_log (principal, at);
CREATE INDEX audit_log_action ON audit_log (action, at);

-- Append-only: an UPDATE, a DELETE or a TRUNCATE of the trail is an error.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % is refused', TG_OP;
END
$$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
