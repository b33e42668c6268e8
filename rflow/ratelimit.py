"""In-process rate limits: a sliding window of run starts per workflow.

``rate_limit: {max, per}`` without ``durable`` keeps its window in the worker's memory:
at most ``max`` starts in any ``per``. A restart or another worker starts with a fresh
window (``durable: true`` keeps a fixed window in Postgres instead).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta


class SlidingWindow:
    """The start times of one workflow's recent runs."""

    def __init__(self, max: int, per: timedelta) -> None:
        self.max = max
        self.per = per
        self.starts: deque[datetime] = deque()

    def claim(self, now: datetime) -> datetime | None:
        """Take a start at ``now``: ``None`` if the window has room, else when it will."""
        while self.starts and self.starts[0] + self.per <= now:
            self.starts.popleft()
        if len(self.starts) < self.max:
            self.starts.append(now)
            return None
        return self.starts[0] + self.per
