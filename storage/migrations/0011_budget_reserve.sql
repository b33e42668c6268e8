-- One statement reserves a charge: it takes the (budget, asset) pair's transaction-scoped
-- advisory lock, checks the cap and inserts the reservation. Statements of a volatile
-- function each take a new snapshot (READ COMMITTED), so the check after the lock sees
-- every reservation committed by the lock's previous holders; one statement instead of
-- two saves a round trip, and a reservation made on its own (autocommit) is one
-- transaction in one round trip.
CREATE FUNCTION budget_reserve(
    p_budget text, p_asset text, p_send_key text, p_amount numeric, p_cap numeric,
    p_window interval, p_run_id text, p_workflow text,
    OUT existed boolean, OUT consumed numeric, OUT inserted boolean
)
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    -- The same two keys as storage/budgets.py's _LOCK (a transaction may hold both).
    PERFORM pg_advisory_xact_lock(hashtext('rflow.budgets.' || current_schema()),
                                  hashtext(p_budget || chr(31) || p_asset));
    existed := EXISTS (SELECT 1 FROM budget_reservations
                       WHERE budget = p_budget AND asset = p_asset AND send_key = p_send_key);
    -- The live total (one row, kept by a trigger) and the spent reservations inside the
    -- window, read from their partial index (older spent rows are never visited).
    SELECT coalesce((SELECT reserved FROM budget_live
                     WHERE budget = p_budget AND asset = p_asset), 0)
         + (SELECT coalesce(sum(amount), 0) FROM budget_reservations
            WHERE budget = p_budget AND asset = p_asset AND status = 'spent'
              AND created_at > now() - p_window)
    INTO consumed;
    inserted := false;
    IF NOT existed AND (p_amount = 0 OR consumed + p_amount <= p_cap) THEN
        INSERT INTO budget_reservations (budget, asset, send_key, amount, run_id, workflow)
        VALUES (p_budget, p_asset, p_send_key, p_amount, p_run_id, p_workflow)
        ON CONFLICT (budget, asset, send_key) DO NOTHING;
        inserted := FOUND;
    END IF;
END
$$;
