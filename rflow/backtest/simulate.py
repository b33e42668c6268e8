"""The answers a backtest gives the engine's effects, other than sends.

Each rule, one function:

- :func:`recorded_answer`: an action the original run made with the same input gets the
  answer it got then (the step's output, or its failure), after as long as it took.
- :func:`state_answer`: ``state_set``, ``list_add`` and ``list_remove`` change the
  replay's own copy of the workflow's durable state, as Postgres would.
- :func:`read_answer` and :func:`query_answer`: a read or a query runs against the chain
  at the firing's block (``latest``, marked, when the node keeps no state there); a query
  whose method could change a chain is never sent.
- :func:`http_answer`: an HTTP call the original run never made has no answer: the run
  stops there, marked ``unrecorded`` with the request shown; ``--live-http`` sends a GET
  for real (marked ``live``), never another method.
- :func:`notify_answer`: a notification the original run never sent is answered as
  delivered (its answer carries nothing else) and marked ``unrecorded``.
- :func:`wait_answer`: a wait or an approval takes the answer the original run got, at
  the time it got it; one it never got takes ``--assume``, or no answer (its timeout).

Nothing here writes anywhere: no topic, no table, no budget, no nonce.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address

from rflow.backtest.chain import READ_ONLY, Chain
from rflow.backtest.history import RecordedRun
from rflow.classify import http_failure
from rflow.codecs.backtests import Mark
from rflow.engine.effects import Execute, Park
from rflow.failures import FailureKind, RflowError, StepError
from rflow.hosts import check_url
from rflow.lang.abi import parse_signature
from rflow.lang.model import Project
from rflow.relayer.build import calldata, revert_reason
from rflow.secrets import Secrets

Assume = Literal["approve", "reject", "timeout"]
SideName = Literal["deployed", "candidate"]
LIVE_TIMEOUT = 30.0


@dataclass(frozen=True)
class Answer:
    """A step's result as the replay gives it: after ``after`` (simulated time)."""

    output: Any = None
    error: StepError | None = None
    after: timedelta = timedelta(0)
    marks: tuple[Mark, ...] = ()


@dataclass(frozen=True)
class Stop:
    """No answer can be given: the run stops at this step."""

    mark: Mark


@dataclass(frozen=True)
class Resolution:
    """A wait's answer: ``payload`` after ``after``, or none (``payload`` unset: its
    timeout applies)."""

    answered: bool
    payload: Any = None
    after: timedelta = timedelta(0)
    marks: tuple[Mark, ...] = ()


@dataclass
class Context:
    """What the answers of one version's effect need."""

    side: SideName
    project: Project
    env: Mapping[str, str]
    chain: Chain
    block: Callable[[str], Awaitable[int]]
    """The firing's block on a network."""
    recorded: RecordedRun | None
    state: dict[str, Any] = field(default_factory=dict)
    """The workflow's durable state as the replay has it (changed in place)."""
    assume: Assume | None = None
    live_http: bool = False
    fetch: Callable[[str, Mapping[str, str]], Awaitable[dict[str, Any]]] | None = None
    """Sends a GET for ``--live-http`` (the caller's HTTP client)."""

    def mark(self, kind: str, path: str | None, text: str) -> Mark:
        return Mark(kind=kind, side=self.side, path=path, text=text)


async def answer(context: Context, effect: Execute) -> Answer | Stop:
    """The answer to ``effect`` (any kind but a send)."""
    kind = effect.kind
    if kind in ("state_set", "list_add", "list_remove"):
        return state_answer(context, effect)
    found = recorded_answer(context, effect)
    if found is not None:
        return found
    if kind == "read":
        return await read_answer(context, effect)
    if kind == "query":
        return await query_answer(context, effect)
    if kind == "http_call":
        return await http_answer(context, effect)
    if kind == "notify":
        return notify_answer(context, effect)
    if kind == "command":
        what = (
            f"command {effect.action.get('name')!r} with args {_shown(effect.action.get('args'))}"
        )
        return Stop(
            context.mark(
                "unrecorded",
                effect.path,
                f"{what}: the original run did not run it so; commands are never run in a backtest",
            )
        )
    return Stop(
        context.mark("not_simulated", effect.path, f"{kind} steps have no simulation in a backtest")
    )


def recorded_answer(context: Context, effect: Execute) -> Answer | None:
    """What the original run got for the same request, if it made it."""
    if context.recorded is None:
        return None
    step = context.recorded.answer_for(effect.kind, effect.action, effect.path, effect.visit)
    if step is None:
        return None
    return Answer(output=step.output, error=step.error, after=step.duration)


def state_answer(context: Context, effect: Execute) -> Answer:
    """A durable state change, applied to the replay's copy as ``storage/workflow_state``
    applies it: ``{"state": {key: new value}}``."""
    action, state = effect.action, context.state
    if effect.kind == "state_set":
        changed = dict(action)
    else:
        name, value = action["list"], action["value"]
        current = state.get(name)
        items = list(current) if isinstance(current, list) else []
        if effect.kind == "list_add":
            items = [*items, value] if isinstance(current, list) else [value]
        else:
            items = [item for item in items if item != value]
        changed = {name: items}
    state.update(changed)
    return Answer(output={"state": changed})


async def read_answer(context: Context, effect: Execute) -> Answer | Stop:
    """A contract read at the firing's block (or the block the step names)."""
    secrets = Secrets(context.env)
    try:
        action = secrets.resolve(effect.action)
        network = action["network"]
        signature = parse_signature(action["function"])
        data = calldata(action["function"], list(action.get("args") or []), "read")
        target = _address(context.project, action)
    except RflowError as exc:
        return Answer(error=secrets.scrub_error(exc.as_data()))
    given = action.get("block")
    block = await context.block(network)
    call = {"to": target, "data": "0x" + data.hex()}
    if isinstance(given, int):
        read = await context.chain.read(network, given, "eth_call", [call, hex(given)])
    elif given not in (None, "latest"):
        read = await context.chain.read(network, block, "eth_call", [call, given])
    else:
        read = await context.chain.read(network, block, "eth_call", [call])
    marks = _latest(context, effect, read.latest, block)
    if read.error is not None:
        reason = revert_reason(read.error.data) or read.error.message
        error = StepError(
            kind=FailureKind.REVERTED, message=f"{action['function']} reverted: {reason}"
        )
        return Answer(error=secrets.scrub_error(error), marks=marks)
    raw = bytes.fromhex(str(read.result).removeprefix("0x"))
    if not signature.outputs:
        return Answer(output="0x" + raw.hex(), marks=marks)
    try:
        values = [jsonable(v) for v in abi_decode(list(signature.outputs), raw)]
    except Exception as exc:  # the node's bytes do not decode as the signature says
        error = StepError(kind=FailureKind.DATA_UNAVAILABLE, message=f"cannot decode: {exc}")
        return Answer(error=error, marks=marks)
    return Answer(output=secrets.scrub(values[0] if len(values) == 1 else values), marks=marks)


async def query_answer(context: Context, effect: Execute) -> Answer | Stop:
    """A JSON-RPC query at the firing's block; a method that could change a chain is
    never sent."""
    secrets = Secrets(context.env)
    method = effect.action.get("method")
    if method not in READ_ONLY:
        return Stop(
            context.mark(
                "unrecorded",
                effect.path,
                f"query {method}: the original run did not make it so, and a backtest sends "
                "no method that could change a chain",
            )
        )
    try:
        action = secrets.resolve(effect.action)
    except RflowError as exc:
        return Answer(error=secrets.scrub_error(exc.as_data()))
    network = action["network"]
    block = await context.block(network)
    read = await context.chain.read(network, block, method, list(action.get("params") or []))
    marks = _latest(context, effect, read.latest, block)
    if read.error is not None:
        error = StepError(kind=FailureKind.DATA_UNAVAILABLE, message=str(read.error))
        return Answer(error=secrets.scrub_error(error), marks=marks)
    return Answer(output=secrets.scrub(jsonable(read.result)), marks=marks)


async def http_answer(context: Context, effect: Execute) -> Answer | Stop:
    """An HTTP call the original run never made: sent for real only as a GET with
    ``--live-http``; else the run stops here, with the request shown."""
    action = effect.action
    method = str(action.get("method", "GET")).upper()
    request = f"{method} {action.get('url')}"
    if action.get("body") is not None:
        request += f" with body {_shown(action['body'])}"
    if context.live_http and method == "GET" and context.fetch is not None:
        secrets = Secrets(context.env)
        try:
            resolved = secrets.resolve(action)
            declared = context.project.workflows.get(effect.workflow)
            check_url(resolved["url"], declared.permissions.http_hosts if declared else None)
            headers = {str(k): str(v) for k, v in (resolved.get("headers") or {}).items()}
            output = await context.fetch(resolved["url"], headers)
            expected = resolved.get("expect_status") or []
            status = output.get("status", 0)
            if not (status in expected if expected else 200 <= status < 300):
                raise http_failure(
                    status,
                    f"HTTP {status} from {resolved['url']}: {str(output.get('body', ''))[:200]}",
                    retryable=resolved.get("retryable_status_codes"),
                )
        except RflowError as exc:
            return Answer(error=secrets.scrub_error(exc.as_data()))
        mark = context.mark("live", effect.path, f"sent for real (--live-http): {request}")
        return Answer(output=secrets.scrub(output), marks=(mark,))
    why = "" if method == "GET" else " (--live-http sends GETs only)"
    return Stop(
        context.mark(
            "unrecorded",
            effect.path,
            f"{request}: the original run did not make this request, so it has no answer{why}",
        )
    )


def notify_answer(context: Context, effect: Execute) -> Answer:
    """A notification the original run never sent: delivered, as far as the run can tell."""
    action = effect.action
    channel = action.get("channel")
    mark = context.mark(
        "unrecorded",
        effect.path,
        f"notify {channel}: {_shown(action.get('message'))} (not sent; answered as delivered)",
    )
    return Answer(output={"channel": channel, "delivered": True}, marks=(mark,))


def wait_answer(context: Context, effect: Park, visit: int) -> Resolution:
    """What a parked wait gets: the original run's answer, ``--assume``, or none."""
    recorded = context.recorded.step(effect.path, visit) if context.recorded else None
    if recorded is not None and recorded.settled and recorded.kind in (None, "wait_for"):
        output = recorded.output
        timed_out = (
            isinstance(output, dict) and output.get("timed_out")
        ) or recorded.error_kind in (
            FailureKind.TIMEOUT,
            FailureKind.CANCELLED,
        )
        if timed_out:
            return Resolution(False)
        if isinstance(output, dict):
            output = {k: v for k, v in output.items() if k not in ("escalation", "goto")}
        return Resolution(True, output, recorded.duration)
    approval = bool(effect.wait.get("approval")) if isinstance(effect.wait, dict) else False
    what = "approval" if approval else "wait"
    if context.assume in ("approve", "reject"):
        mark = context.mark("assumed", effect.path, f"{what} answered {context.assume} (--assume)")
        if approval:
            payload = {"decision": context.assume, "by": f"--assume {context.assume}"}
            return Resolution(True, payload, marks=(mark,))
        if context.assume == "approve":
            return Resolution(True, {"assumed": True}, marks=(mark,))
        return Resolution(False, marks=(mark,))
    if context.assume == "timeout":
        mark = context.mark(
            "assumed", effect.path, f"{what} left without an answer (--assume timeout)"
        )
        return Resolution(False, marks=(mark,))
    mark = context.mark(
        "no_answer",
        effect.path,
        f"{what}: the original run got no answer here; left unanswered, its timeout applies "
        "(--assume approve|reject|timeout chooses)",
    )
    return Resolution(False, marks=(mark,))


def _latest(context: Context, effect: Execute, latest: bool, block: int) -> tuple[Mark, ...]:
    if not latest:
        return ()
    text = f"{effect.kind} at the latest block: the node keeps no state at block {block}"
    return (context.mark("latest", effect.path, text),)


def _address(project: Project, action: Mapping[str, Any]) -> str:
    if action.get("to"):
        return to_checksum_address(action["to"])
    contract = project.contracts.get(action.get("contract") or "")
    address = contract.address.get(action["network"]) if contract else None
    if address is None:
        raise RflowError(
            FailureKind.INVALID_INPUT,
            f"contract {action.get('contract')!r} has no address on {action['network']}",
        )
    return to_checksum_address(address)


def _shown(value: Any, limit: int = 300) -> str:
    from rflow.codecs import json

    text = value if isinstance(value, str) else json.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def jsonable(value: Any) -> Any:
    """A decoded ABI value (or an RPC answer) as JSON data: bytes as 0x hex."""
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value
