-- Approvals: an escalated wait remembers when it was escalated (its timeout_at is then
-- the extended deadline), and the inbox of pending approvals has an index of its own.
ALTER TABLE waits ADD COLUMN escalated_at timestamptz;

CREATE INDEX waits_pending_approvals ON waits (timeout_at)
    WHERE kind = 'approval' AND resolved_at IS NULL;
