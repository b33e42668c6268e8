"""In-memory stand-ins for the ingress's producer and idempotency store."""

from __future__ import annotations

import textwrap
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rflow.codecs import TriggerRecord
from rflow.lang import Project, validate_text
from rflow.storage import Unavailable
from rflow.storage.webhooks import STALE_AFTER, Claim, ClaimOutcome
from rflow.streams.producer import ProduceError

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def project(yaml: str) -> Project:
    """A validated project from ``yaml`` (dedented); fails the test on any error."""
    report = validate_text(textwrap.dedent(yaml), {}, "project.yaml")
    assert report.project is not None, [str(d) for d in report.diagnostics]
    return report.project


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


class FakeProducer:
    """Keeps what it was asked to produce; fails on demand."""

    def __init__(self) -> None:
        self.records: list[TriggerRecord] = []
        self.fail_next = 0

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]:
        if self.fail_next:
            self.fail_next -= 1
            raise ProduceError("Kafka at test did not accept the record: down")
        self.records.append(record)
        return 0, len(self.records) - 1


@dataclass
class _Row:
    generation: int
    status: str
    claim_id: uuid.UUID | None
    claimed_at: datetime | None
    expires_at: datetime


class MemoryDeliveries:
    """:mod:`rflow.storage.webhooks`'s claim rules over dicts, on a test clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.rows: dict[tuple[str, str], _Row] = {}
        self.signatures: dict[tuple[str, str], tuple[uuid.UUID, datetime]] = {}
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("postgres is down")

    async def claim(self, workflow: str, key: str, *, claim_id: uuid.UUID, ttl: timedelta) -> Claim:
        self._check()
        now = self.clock()
        row = self.rows.get((workflow, key))
        if row is None:
            self.rows[(workflow, key)] = _Row(1, "pending", claim_id, now, now + ttl)
            return Claim(ClaimOutcome.CLAIMED, 1)
        if row.status == "accepted" and row.expires_at > now:
            return Claim(ClaimOutcome.DUPLICATE, row.generation)
        if row.status == "pending" and row.claimed_at and row.claimed_at > now - STALE_AFTER:
            return Claim(ClaimOutcome.BUSY, row.generation)
        if row.status == "accepted":
            row.generation += 1
        row.status, row.claim_id, row.claimed_at = "pending", claim_id, now
        row.expires_at = now + ttl
        return Claim(ClaimOutcome.CLAIMED, row.generation)

    async def accept(self, workflow: str, key: str, *, generation: int, ttl: timedelta) -> bool:
        self._check()
        row = self.rows[(workflow, key)]
        if row.generation != generation or row.status != "pending":
            return False
        row.status, row.claim_id, row.expires_at = "accepted", None, self.clock() + ttl
        return True

    async def release(self, workflow: str, key: str, *, claim_id: uuid.UUID) -> bool:
        self._check()
        row = self.rows[(workflow, key)]
        if row.claim_id != claim_id or row.status != "pending":
            return False
        row.claim_id = row.claimed_at = None
        return True

    async def claim_signature(
        self,
        scope: str,
        signature: str,
        *,
        claim_id: uuid.UUID,
        expires_at: datetime,
        now: datetime,
    ) -> bool:
        self._check()
        held = self.signatures.get((scope, signature))
        if held is not None and held[1] > now:
            return False
        self.signatures[(scope, signature)] = (claim_id, expires_at)
        return True

    async def release_signature(self, scope: str, signature: str, *, claim_id: uuid.UUID) -> bool:
        self._check()
        held = self.signatures.get((scope, signature))
        if held is None or held[0] != claim_id:
            return False
        del self.signatures[(scope, signature)]
        return True
