-- Who asked, kept where the thing asked for is recorded: the principal who requested a
-- speed-up or a cancel of a send, who retried a failed run, who replayed a dead letter.
ALTER TABLE send_controls ADD COLUMN requested_by text;
ALTER TABLE runs ADD COLUMN retried_by text;
ALTER TABLE dead_runs ADD COLUMN retried_by text;
ALTER TABLE dead_letters ADD COLUMN replayed_by text;
