-- The budget functions name their schema in their bodies instead of carrying
-- `SET search_path FROM CURRENT`: a new search_path on every call makes the server
-- resolve it again, which cost a reservation about as much as the rest of its work. The
-- schema is written in when the migration runs (the one it is applied to), so the
-- functions still find their tables whatever the caller's search_path is.
--
-- PL/pgSQL keeps a generic plan of each statement per session, made from the statistics
-- of the moment. Made while budget_reservations looked empty (a new install, or an
-- ANALYZE after its rows were deleted), the plan of the window's sum could scan every
-- reservation of the budget through the primary key and filter the spent ones, and it
-- kept doing so while a burst of sends grew the table, each reservation slower than the
-- one before, until the next ANALYZE. Now the sum can only be answered by one index: the
-- spent rows keyed by the (budget, asset) pair as one value, which the primary key cannot
-- match; and budget_reserve runs with sequential scans off, so none of its lookups
-- (that index, the primary key, budget_live's key) turns into a scan of the table.
CREATE INDEX budget_reservations_spent_pair
    ON budget_reservations ((budget || chr(31) || asset), created_at) INCLUDE (amount)
    WHERE status = 'spent';
DROP INDEX budget_reservations_spent;

DO $migration$
BEGIN
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION budget_live_change() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status = 'reserved' THEN
        UPDATE %1$I.budget_live SET reserved = reserved - OLD.amount
        WHERE budget = OLD.budget AND asset = OLD.asset;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status = 'reserved' THEN
        INSERT INTO %1$I.budget_live AS live (budget, asset, reserved)
        VALUES (NEW.budget, NEW.asset, NEW.amount)
        ON CONFLICT (budget, asset) DO UPDATE SET reserved = live.reserved + NEW.amount;
    END IF;
    RETURN NULL;
END
$fn$
$body$, current_schema());

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION budget_reserve(
    p_budget text, p_asset text, p_send_key text, p_amount numeric, p_cap numeric,
    p_window interval, p_run_id text, p_workflow text,
    OUT existed boolean, OUT consumed numeric, OUT inserted boolean
)
LANGUAGE plpgsql
VOLATILE
SET enable_seqscan = off
AS $fn$
BEGIN
    -- The same two keys as storage/budgets.py's _LOCK (a transaction may hold both).
    PERFORM pg_advisory_xact_lock(hashtext(%2$L), hashtext(p_budget || chr(31) || p_asset));
    existed := EXISTS (SELECT 1 FROM %1$I.budget_reservations
                       WHERE budget = p_budget AND asset = p_asset AND send_key = p_send_key);
    -- The live total (one row, kept by a trigger) and the spent reservations inside the
    -- window, read from their partial index by pair (older spent rows are never visited).
    SELECT coalesce((SELECT reserved FROM %1$I.budget_live
                     WHERE budget = p_budget AND asset = p_asset), 0)
         + (SELECT coalesce(sum(amount), 0) FROM %1$I.budget_reservations
            WHERE budget || chr(31) || asset = p_budget || chr(31) || p_asset
              AND status = 'spent' AND created_at > now() - p_window)
    INTO consumed;
    inserted := false;
    IF NOT existed AND (p_amount = 0 OR consumed + p_amount <= p_cap) THEN
        INSERT INTO %1$I.budget_reservations (budget, asset, send_key, amount, run_id, workflow)
        VALUES (p_budget, p_asset, p_send_key, p_amount, p_run_id, p_workflow)
        ON CONFLICT (budget, asset, send_key) DO NOTHING;
        inserted := FOUND;
    END IF;
END
$fn$
$body$, current_schema(), 'rflow.budgets.' || current_schema());
END
$migration$;

-- CREATE OR REPLACE keeps nothing of the old definition's SET clause.
ALTER FUNCTION budget_live_change() RESET ALL;
