"""The worker's Kafka consumer holds a fetch with nothing new briefly, not Faust's 1.5 s."""

from __future__ import annotations

from rflow.settings import Settings
from rflow.streams.app import FETCH_MAX_WAIT_MS, create_app


async def test_the_worker_consumer_waits_briefly_for_a_fetch():
    app = create_app(Settings(api_token="t"))
    thread = app.consumer._thread
    consumer = thread._create_worker_consumer(app.transport)
    # The fetcher is built from this attribute when the consumer starts.
    assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS == 50
