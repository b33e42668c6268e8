"""The benchmark's workflow as a DBOS application, on the stack's Postgres.

    PEERS_DATABASE_URL=postgresql://... PEERS_SCHEMA=<schema> PEERS_SINK_URL=http://... \
    PEERS_APP=<name> python dbos_app.py

Started by bench/peers/engines.py in the benchmark's virtualenv. DBOS keeps its system
tables in PEERS_SCHEMA; the workflow's state row lives there too. Workflows arrive on the
queue ``bench``, partitioned by concurrency group with one workflow at a time per
partition (as rflow's lanes and Restate's virtual objects run a group), enqueued from
outside by ``DBOSClient``. Everything else is DBOS's defaults (the queue is polled once a
second). Prints ``peers: ready`` once it listens to the queue.
"""

from __future__ import annotations

import os
import threading

import httpx
import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SQLAlchemyDatasource

URL = os.environ["PEERS_DATABASE_URL"]
SCHEMA = os.environ["PEERS_SCHEMA"]
SINK_URL = os.environ["PEERS_SINK_URL"]

config: DBOSConfig = {
    "name": os.environ["PEERS_APP"],
    "system_database_url": URL,
    "dbos_system_schema": SCHEMA,
}
DBOS(config=config)
data = SQLAlchemyDatasource.create(URL, schema=SCHEMA)
with data.engine.begin() as conn:
    conn.execute(
        sa.text(
            f'CREATE TABLE IF NOT EXISTS "{SCHEMA}".workflow_state '
            "(workflow text, key text, value jsonb NOT NULL, PRIMARY KEY (workflow, key))"
        )
    )
http = httpx.Client()

_SET = sa.text(
    f'INSERT INTO "{SCHEMA}".workflow_state (workflow, key, value) '
    "VALUES ('bench', 'last_seq', to_jsonb(CAST(:seq AS bigint))) "
    "ON CONFLICT (workflow, key) DO UPDATE SET value = EXCLUDED.value"
)


# state_set: the workflow's durable state, one row as rflow keeps it, written once per
# workflow by a DBOS transaction (its result checkpointed in the same transaction).
# READ COMMITTED, as rflow's statement runs: runs of all groups write the same row, which
# SERIALIZABLE (DBOS's default) would turn into serialization failures and retries.
@data.transaction(isolation_level="READ COMMITTED")
def remember(seq: int) -> None:
    data.sql_session().execute(_SET, {"seq": seq})


@DBOS.step()
def tell(key: str, message: str) -> None:
    """POST the message to the sink, as rflow's webhook channel does."""
    body = {"message": message, "severity": "info", "workflow": "bench", "run_id": DBOS.workflow_id}
    response = http.post(f"{SINK_URL}/notify", json=body, headers={"Idempotency-Key": key})
    response.raise_for_status()


@DBOS.workflow(name="bench")
def bench(trigger: dict) -> None:
    remember(trigger["seq"])
    # choose: "high" jumps to tell and anything else continues to the next step, which is
    # tell: both branches reach the notify, so there is nothing to branch on here.
    tell(f"bench:{trigger['trigger_key']}:tell", f"run {trigger['seq']} ({trigger['priority']})")


def main() -> None:
    DBOS.launch()
    DBOS.register_queue("bench", partition_concurrency=1)
    print("peers: ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
