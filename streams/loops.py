"""Work a worker repeats on its own, beside the streams."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]


def every(app: Any, seconds: float, name: str) -> Callable[[Work], Work]:
    """Run the decorated coroutine function every ``seconds`` after its last run ended,
    from when the worker is ready until it stops.

    Faust's timers keep a fixed rate and log a warning whenever a run outlasts the
    interval, which a scan of Postgres does on a loaded machine; here a slow run only
    delays the next. A run that raises is logged and the next one comes.
    """

    def decorate(work: Work) -> Work:
        async def repeat() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    await work()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # one failed run must not end the loop
                    if app.should_stop:
                        return  # cut short by the worker stopping: nothing to report
                    log.warning("%s failed: %r", name, exc)

        repeat.__name__ = repeat.__qualname__ = name
        repeat.__doc__ = work.__doc__
        app.task(repeat)
        return work

    return decorate
