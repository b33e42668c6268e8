"""Sends and dead letters: pending transactions with speed-up and cancel; dead-lettered
runs (retried) and records (replayed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow.console.auth import PREFIX
from rflow.lang.units import UnitError, parse_amount
from rflow.storage import dead_letters, runs
from rflow.streams.control import ControlError

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit


def _amount(visit: Visit, name: str, label: str) -> int | None:
    value = visit.text(name)
    if value is None:
        return None
    try:
        return parse_amount(value)
    except UnitError as exc:
        raise ControlError(f"{label}: {exc}", 400) from None


def attach(console: Console) -> None:
    """Mount the sends and dead-letter pages and their actions."""
    control = console.control

    async def sends_page(visit: Visit) -> Any:
        pending = await control.sends.pending(limit=500)
        deferred = await control.sends.deferred(limit=500)
        return console.render(
            visit,
            "sends.html",
            active="sends",
            sends=pending,
            deferred=deferred,
            waiting=await console.approvals_waiting(),
            live=True,
        )

    async def speedup(visit: Visit) -> Any:
        send_id = visit.params["send_id"]

        async def work() -> Any:
            return await control.sends.speedup(
                send_id,
                max_fee=_amount(visit, "max_fee", "max fee"),
                tip=_amount(visit, "tip", "tip"),
                above_cap=visit.text("above_cap") == "yes",
                by=visit.principal.name,
            )

        def said(result: dict[str, Any]) -> str:
            return (
                f"Send {send_id} sped up: transaction {result['tx_hash']} at nonce "
                f"{result['nonce']}, max fee {result['max_fee_per_gas']:,} wei, tip "
                f"{result['max_priority_fee_per_gas']:,} wei ({result['broadcast']})."
            )

        return await console.act(visit, work, said, to=f"{PREFIX}/sends")

    async def cancel(visit: Visit) -> Any:
        send_id = visit.params["send_id"]

        def said(result: dict[str, Any]) -> str:
            return (
                f"Send {send_id} is being cancelled: a zero-value transfer {result['tx_hash']} "
                f"takes its nonce {result['nonce']} ({result['broadcast']}). Its step fails "
                "as cancelled once that is mined."
            )

        return await console.act(
            visit,
            lambda: control.sends.cancel(send_id, by=visit.principal.name),
            said,
            to=f"{PREFIX}/sends",
        )

    async def dead_page(visit: Visit) -> Any:
        async def load(conn: Any) -> tuple[Any, Any]:
            return await runs.dead_runs(conn, 200), await dead_letters.recent(conn, limit=200)

        dead_runs, records = await console.db(load, "dead letters")
        return console.render(
            visit,
            "dead_letters.html",
            active="dead-letters",
            dead_runs=dead_runs,
            records=records,
            waiting=await console.approvals_waiting(),
        )

    async def replay(visit: Visit) -> Any:
        try:
            letter = int(visit.params["letter_id"])
        except ValueError:
            return console.done(visit, "A dead letter's id is a number.", kind="error")

        def said(result: dict[str, Any]) -> str:
            return (
                f"Dead letter {letter} replayed to {result['topic']} (partition "
                f"{result['partition']}, offset {result['offset']})."
            )

        # The CLI's replay: the row locked and marked, so a letter is replayed once.
        return await console.act(
            visit,
            lambda: control.dead_letters.replay(letter, by=visit.principal.name),
            said,
            to=f"{PREFIX}/dead-letters",
        )

    console.route("/sends", get=sends_page, needs="runs.read")
    console.route("/sends/{send_id}/speedup", post=speedup, needs="sends.speedup")
    console.route("/sends/{send_id}/cancel", post=cancel, needs="sends.cancel")
    console.route("/dead-letters", get=dead_page, needs="runs.read")
    console.route("/dead-letters/{letter_id}/replay", post=replay, needs="dead_letters.replay")
