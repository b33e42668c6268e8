-- Deployments move forward: a project whose source is an older deployment's is deployed
-- again only as a rollback, an operator's action recorded here (action deploy.rollback,
-- the newest deployment it went back from, who asked). Looking a source up by its digest
-- tells an older project from a new one.
ALTER TABLE deployments
    ADD COLUMN action text NOT NULL DEFAULT 'deploy'
        CHECK (action IN ('deploy', 'deploy.rollback')),
    ADD COLUMN replaced bigint,
    ADD COLUMN actor text;

CREATE INDEX deployments_by_digest ON deployments (digest, id);
