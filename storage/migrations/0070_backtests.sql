-- Backtests: each report `rflow backtest` (and `rflow deploy --backtest`) made, kept for
-- the console. The only table a backtest writes: its replay reads the read model and
-- the spend ledger and writes nothing else.
CREATE TABLE backtests (
    id           bigserial   PRIMARY KEY,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    candidate    text        NOT NULL,            -- the project folder given
    digest       text,                            -- the candidate source's digest
    deployment   bigint,                          -- the deployment compared with
    window_from  timestamptz NOT NULL,
    window_to    timestamptz NOT NULL,
    workflows    text[]      NOT NULL,
    outcome      text        NOT NULL CHECK (outcome IN ('same', 'different', 'failed')),
    firings      integer     NOT NULL,
    differing    integer     NOT NULL,
    money_moves  boolean     NOT NULL,
    reason       text,                            -- why it could not run
    report       jsonb       NOT NULL             -- the whole report (codecs/backtests.py)
);
CREATE INDEX backtests_recent ON backtests (finished_at DESC);
