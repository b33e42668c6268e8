"""How the console shows values to a person: times, durations, amounts, failures, step
timelines, redacted inputs and version diffs. Pure functions, no I/O."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import yaml

from rflow.codecs import json

WEI_PER_ETHER = 10**18
WEI_PER_GWEI = 10**9
REDACTED = "•••• (hidden)"

SECRET_NAME = re.compile(
    r"(authorization|password|passwd|secret|token|api[_-]?key|private[_-]?key|cookie|signature)",
    re.IGNORECASE,
)
"""Mapping keys whose values the console never shows (``Authorization`` headers, keys...)."""
_PLACEHOLDER = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")

FAILURES: dict[str, str] = {
    "simulation_failed": "the transaction would revert: the node's simulation refused it",
    "reverted": "the transaction was mined but reverted on chain",
    "insufficient_funds": "the relayer's account cannot pay for the transaction",
    "rpc_timeout": "the chain node did not answer in time (retried by a retry policy)",
    "rate_limited": "a service answered that it is rate limited (retried by a retry policy)",
    "nonce_conflict": "another transaction took the nonce",
    "timeout": "the step ran out of time",
    "expired": "the transaction was not mined in time and was replaced",
    "dropped": "the node forgot the transaction before it was mined",
    "data_unavailable": "data the step reads was not there (retried by a retry policy)",
    "assert_failed": "a check in the workflow was false",
    "gas_cap_exceeded": "the network asked more gas than the step allows",
    "budget_exceeded": "the send would take a budget over its cap: nothing was sent",
    "budget_undecodable": "a strict budget caps the token, and how much the send moves "
    "cannot be read: nothing was sent",
    "permission_denied": "the workflow's permissions do not allow this",
    "invalid_input": "the step's input was not valid when it ran",
    "signer_unavailable": "the relayer's HSM or KMS did not answer: nothing was signed (retried by a retry policy)",
    "cancelled": "cancelled by an operator or a newer run, or stopped by the race or parallel it was in",
    "rejected": "a person (or the approval's timeout) said no",
    "compensation_failed": "undoing a completed step failed: what it undid may need a person",
}
"""What each failure kind means, in a sentence a newcomer understands."""

STATUS_HELP: dict[str, str] = {
    "pending": "admitted, waiting to start",
    "running": "running a step",
    "waiting": "parked: waiting for an approval, an event or a delay",
    "succeeded": "finished, every step done",
    "failed": "stopped by a failure",
    "cancelled": "stopped on request (a step: stopped by the race or parallel it was in)",
    "skipped": "never started: its concurrency group was busy",
    "rejected": "ended by a rejected approval",
}


def now() -> datetime:
    return datetime.now(UTC)


def when(value: datetime | str | None) -> str:
    """A timestamp as ``2026-12-01 22:01:07`` (UTC), or ``—``."""
    value = _datetime(value)
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime | str | None) -> str:
    value = _datetime(value)
    return value.astimezone(UTC).isoformat() if value else ""


def ago(value: datetime | str | None, at: datetime | None = None) -> str:
    """How long ago ``value`` was: ``5s ago``, ``3 min ago``, ``in 2 h`` for the future."""
    value = _datetime(value)
    if value is None:
        return ""
    span = (at or now()) - value
    seconds = abs(span.total_seconds())
    text = f"{seconds:.0f} s" if seconds < 60 else span_text(timedelta(seconds=seconds))
    return f"in {text}" if span < timedelta(0) else f"{text} ago"


_ISO = re.compile(r"\b(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(?:\+00:00|Z)")


def readable(text: str | None) -> str:
    """``text`` with its ISO timestamps (as the engine writes them into ``waiting_for``)
    shown as ``2026-12-01 22:01:07 UTC``."""
    return _ISO.sub(r"\1 \2 UTC", text or "")


def span_text(span: timedelta) -> str:
    """A duration for people: ``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def age(seconds: float) -> str:
    """How long something has waited, from its age in seconds."""
    return span_text(timedelta(seconds=max(seconds, 0.0)))


def duration(
    start: datetime | str | None, end: datetime | str | None, running: bool = False
) -> str:
    """How long from ``start`` to ``end`` (to now while ``running``), or ``—``."""
    start, end = _datetime(start), _datetime(end)
    if start is None:
        return "—"
    if end is None:
        return f"{span_text(now() - start)} so far" if running else "—"
    return span_text(end - start)


def _datetime(value: datetime | str | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def grouped(value: int | None) -> str:
    """An integer with thousands separators (``1,000,000``), or ``—``."""
    return "—" if value is None else f"{value:,}"


def _decimal(value: int, unit: int, places: int) -> str:
    text = f"{Decimal(value) / Decimal(unit):,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ether(wei: int | None) -> str:
    """Wei as ether (``0.5 ETH``), exact to the wei."""
    return "—" if wei is None else f"{_decimal(int(wei), WEI_PER_ETHER, 18)} ETH"


def gwei(wei: int | None) -> str:
    """Wei as gwei to three decimals (``2.539 gwei``), for fees."""
    return "—" if wei is None else f"{_decimal(int(wei), WEI_PER_GWEI, 3)} gwei"


def fee(wei: int | None) -> str:
    """A fee paid, in ETH to six significant digits (``0.0000976413 ETH``)."""
    if wei is None:
        return "—"
    return f"{Decimal(int(wei)) / Decimal(WEI_PER_ETHER):.6g} ETH"


def short_hash(value: str | None) -> str:
    """A transaction hash shortened for a table (``0x78addf…64fbe4``); the page keeps
    the whole one in its title."""
    if not value or len(value) <= 20:
        return value or "—"
    return f"{value[:8]}…{value[-6:]}"


def percent_text(value: float) -> str:
    """A share of a cap as people read it: ``< 0.1 %`` rather than ``0.0 %``."""
    if 0 < value < 0.1:
        return "< 0.1 %"
    return f"{value:.1f} %"


def asset_amount(asset: str, amount: int | None) -> str:
    """An amount of a budget's asset: native value and gas in ETH, tokens in raw units."""
    if amount is None:
        return "—"
    if asset in ("native", "gas"):
        return ether(amount)
    return f"{grouped(amount)} {asset}"


def asset_label(asset: str) -> str:
    return {"native": "native value (ETH)", "gas": "gas paid (ETH)"}.get(asset, f"{asset} (token)")


def failure(kind: str | None) -> str:
    """What a failure kind means."""
    return FAILURES.get(kind or "", "")


def redact(value: Any, _key: str = "") -> Any:
    """``value`` with the values of secret-looking keys hidden (a ``${VAR}`` placeholder,
    which is what a journal keeps of a secret, stays visible: it says which variable)."""
    if isinstance(value, Mapping):
        return {key: redact(item, str(key)) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, _key) for item in value]
    if _key and SECRET_NAME.search(_key) and value not in (None, ""):
        if isinstance(value, str) and _PLACEHOLDER.match(value):
            return value
        return REDACTED
    return value


def pretty(value: Any) -> str:
    """A value as indented JSON, for the places that show a whole document."""
    if value is None:
        return ""
    return json.pretty(value)


@dataclass(frozen=True)
class Field:
    """One line of a value shown as a list: its label and its text."""

    label: str
    text: str
    long: bool = False


def fields(value: Any, prefix: str = "", depth: int = 0) -> list[Field]:
    """A (nested) value as labelled lines a person reads without knowing JSON: ``tx.hash``
    ``0x…``; lists as ``items[0]``. Deeply nested values stay one JSON line each."""
    if isinstance(value, Mapping) and depth < 3:
        found: list[Field] = []
        for key, item in value.items():
            found.extend(fields(item, f"{prefix}.{key}" if prefix else str(key), depth + 1))
        return found or [Field(prefix or "value", "(empty)")]
    if isinstance(value, list) and depth < 3 and len(value) <= 20:
        found = []
        for index, item in enumerate(value):
            found.extend(fields(item, f"{prefix}[{index}]", depth + 1))
        return found or [Field(prefix or "value", "(none)")]
    if isinstance(value, str):
        text = value
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = grouped(value) if abs(value) >= 10_000 and not _plain(prefix) else str(value)
    else:
        text = json.pretty(value) if isinstance(value, (dict, list)) else str(value)
    return [Field(prefix or "value", text, long=len(text) > 120)]


_PLAIN_NAMES = frozenset(
    {"number", "block", "timestamp", "chain_id", "chainid", "nonce", "index", "offset"}
    | {"partition", "id", "attempt", "port", "time", "height", "head", "year"}
)
_PLAIN_ENDINGS = ("_id", "_index", "_number", "_block", "_timestamp", "_time", "_nonce", "_at")


def _plain(label: str) -> bool:
    """Whether the integer at ``label`` (``block.timestamp``, ``chain_id``) is a number
    people read whole, as chain explorers print it: block numbers, timestamps, chain
    ids, nonces, positions. Amounts and counts get thousands separators."""
    name = label.rsplit(".", 1)[-1].split("[", 1)[0].lower()
    return name in _PLAIN_NAMES or name.endswith(_PLAIN_ENDINGS)


@dataclass
class Bar:
    """Where a step sits on its run's timeline, in percent of the run's span."""

    left: float = 0.0
    width: float = 0.0
    open: bool = False


def timeline(
    steps: Sequence[Mapping[str, Any]], start: datetime | None, end: datetime | None
) -> list[Bar]:
    """A bar per step: where it started and how long it took, relative to the run."""
    bars: list[Bar] = []
    stamps = [s["started_at"] for s in steps if s.get("started_at")]
    begin = start or (min(stamps) if stamps else None)
    finish = end or now()
    if begin is None:
        return [Bar() for _ in steps]
    total = max((finish - begin).total_seconds(), 0.001)
    for step in steps:
        started = step.get("started_at") or begin
        settled = step.get("settled_at")
        stop = settled or finish
        left = min(max((started - begin).total_seconds() / total * 100, 0.0), 100.0)
        width = max(min((stop - started).total_seconds() / total * 100, 100.0 - left), 0.6)
        bars.append(Bar(round(left, 2), round(width, 2), settled is None))
    return bars


def definition_text(definition: Mapping[str, Any] | None) -> str:
    """A stored workflow definition as YAML, keys in their stored order, without the
    fields left unset (a stored definition spells every default out as null)."""
    if definition is None:
        return ""
    return yaml.safe_dump(_set(dict(definition)), sort_keys=False, allow_unicode=True, width=100)


def _set(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _set(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_set(item) for item in value]
    return value


@dataclass
class DiffLine:
    """One line of a side-by-side diff: ``kind`` is ``same``, ``changed`` (a line of the
    old text beside the one that replaced it), ``removed``, ``added`` or ``gap``
    (unchanged lines left out)."""

    kind: str
    old: str = ""
    new: str = ""
    old_no: int | None = None
    new_no: int | None = None


def diff(old: str, new: str, context: int = 3) -> list[DiffLine]:
    """The lines that differ between two texts, with ``context`` unchanged lines around
    each change; empty when they are the same."""
    a, b = old.splitlines(), new.splitlines()
    lines: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        if lines:
            lines.append(DiffLine("gap"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(
                    DiffLine("same", a[i], b[j], i + 1, j + 1)
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                )
                continue
            paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            lines.extend(
                DiffLine("changed", a[i1 + k], b[j1 + k], i1 + k + 1, j1 + k + 1)
                for k in range(paired)
            )
            lines.extend(
                DiffLine("removed", old=a[i], old_no=i + 1) for i in range(i1 + paired, i2)
            )
            lines.extend(DiffLine("added", new=b[j], new_no=j + 1) for j in range(j1 + paired, j2))
    return lines


@dataclass
class SpendSeries:
    """Cumulative spend of one cap over its window, as the chart draws it."""

    asset: str
    cap: int
    times: list[float] = field(default_factory=list)
    """Unix seconds."""
    totals: list[int] = field(default_factory=list)


def spend_series(
    charges: Iterable[Mapping[str, Any]],
    caps: Mapping[str, int],
    window_start: datetime,
    at: datetime,
) -> list[SpendSeries]:
    """Per asset of ``caps``: the budget's consumption over its window, one point per
    charge (reserved and spent charges count; a live reservation older than the window
    counts from the window's start)."""
    series = {asset: SpendSeries(asset, cap) for asset, cap in caps.items()}
    for item in series.values():
        item.times.append(window_start.timestamp())
        item.totals.append(0)
    for charge in charges:
        item = series.get(charge["asset"])
        if item is None:
            continue
        moment = max(charge["created_at"], window_start).timestamp()
        item.times.append(moment)
        item.totals.append(item.totals[-1] + int(charge["amount"]))
    for item in series.values():
        item.times.append(at.timestamp())
        item.totals.append(item.totals[-1])
    return list(series.values())


def percent(part: int, whole: int) -> float:
    """``part`` of ``whole`` in percent, within 0..100 (a zero cap is full)."""
    if whole <= 0:
        return 100.0 if part > 0 else 0.0
    return round(min(max(part / whole * 100, 0.0), 100.0), 2)
