"""The door every operator action goes through: the authorization decision, then the
audit trail.

The HTTP API, the console and the CLI each name the action a route, a page or form, or a
command needs, and hand it here with the principal who asks. :meth:`Gate.check` asks
:func:`rflow.authz.decide`; a refusal is written to the audit trail and raised as
:class:`Forbidden` (403, naming the action and the principal) before anything is done.
:meth:`Gate.perform` checks, carries the action out, and writes how it ended (``done``,
or ``failed`` with the action's own reason). Reads are checked but not written when
they pass (:attr:`rflow.authz.Action.audited`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import psycopg

from rflow import authz
from rflow.authz import Principal, Target
from rflow.storage import StorageError, audit
from rflow.storage.audit import Outcome, Via
from rflow.streams.errors import ControlError

log = logging.getLogger(__name__)

T = TypeVar("T")
Database = Callable[[Callable[[psycopg.AsyncConnection], Awaitable[Any]]], Awaitable[Any]]

ANONYMOUS = "(anonymous)"
"""How the trail names a request that no principal made."""


_TARGETS = {
    "run_id": "run",
    "send_id": "send",
    "workflow": "workflow",
    "name": "workflow",
    "letter_id": "dead_letter",
    "key": "trigger",
}


def target_of(params: Mapping[str, str]) -> Target | None:
    """What a route's path parameters name: a run, a send, a workflow, a schedule (its
    workflow and trigger), a dead letter."""
    if "workflow" in params and "trigger" in params:
        return Target("schedule", f"{params['workflow']}/{params['trigger']}")
    for name, kind in _TARGETS.items():
        if name in params:
            return Target(kind, params[name])
    return None


class Forbidden(ControlError):
    """The principal may not take the action: nothing was done (403)."""

    def __init__(self, message: str, *, action: str, principal: str) -> None:
        super().__init__(f"forbidden: {message}", 403, action=action, principal=principal)
        self.action = action
        self.principal = principal


class Gate:
    """Authorization and the audit trail, over ``database`` (runs work on a connection)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def check(
        self,
        who: Principal | None,
        action: str,
        target: Target | None = None,
        *,
        via: Via,
        args: Mapping[str, Any] | None = None,
    ) -> authz.Decision:
        """The decision for ``who`` taking ``action``; a refusal is recorded and raised as
        :class:`Forbidden`."""
        decision = authz.decide(who, action, target)
        if not decision.allowed:
            await self.record(
                who, action, target, via=via, outcome="refused", reason=decision.why, args=args
            )
            raise Forbidden(decision.why, action=action, principal=who.name if who else ANONYMOUS)
        return decision

    async def perform(
        self,
        who: Principal | None,
        action: str,
        target: Target | None,
        work: Callable[[], Awaitable[T]],
        *,
        via: Via,
        args: Mapping[str, Any] | None = None,
    ) -> T:
        """Check, then carry out ``work`` and record how it ended (a refusal inside it,
        such as a retry's resends, is recorded where it is raised)."""
        await self.check(who, action, target, via=via, args=args)
        try:
            result = await work()
        except Forbidden:
            raise
        except Exception as exc:
            await self.done(who, action, target, via=via, args=args, error=str(exc))
            raise
        await self.done(who, action, target, via=via, args=args)
        return result

    async def done(
        self,
        who: Principal | None,
        action: str,
        target: Target | None,
        *,
        via: Via,
        args: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Record that ``action`` was carried out (``failed`` with ``error``), when the
        action is one the trail keeps."""
        found = authz.ACTIONS.get(action)
        if found is None or not found.audited:
            return
        outcome: Outcome = "failed" if error is not None else "done"
        await self.record(who, action, target, via=via, outcome=outcome, reason=error, args=args)

    async def record(
        self,
        who: Principal | None,
        action: str,
        target: Target | None,
        *,
        via: Via,
        outcome: Outcome,
        reason: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row; a trail that cannot be written is logged, and does not undo
        (or allow) what was decided."""
        entry = audit.Entry(
            principal=who.name if who else ANONYMOUS,
            role=who.role if who else None,
            action=action,
            outcome=outcome,
            via=via,
            target_kind=target.kind if target else None,
            target_id=target.id if target else None,
            arguments=authz.arguments(action, dict(args or {})),
            reason=reason,
        )
        try:
            await self.database(lambda conn: audit.record(conn, entry))
        except StorageError as exc:
            log.error(
                "the audit trail cannot record %s %s by %s (%s): %s",
                action,
                outcome,
                entry.principal,
                reason or "",
                exc,
            )
