"""The expression context of a run, and rendering of step inputs through it.

An effect's input is rendered with :func:`render_input`: ``${{ env.NAME }}`` becomes the
placeholder ``${NAME}`` and every ``${`` in interpolated run data becomes ``$${``, so the
executor that fills placeholders in from the worker's environment fills in exactly those
the definition wrote, and the values never enter run state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from rflow.engine.state import RunState, StepRecord
from rflow.expr import (
    Expr,
    ExpressionError,
    Template,
    evaluate,
    has_expression,
    parse,
    parse_template,
)
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.envsubst import escape, placeholder

_UNSET = object()

WAIT_URL_VARIABLE = "RFLOW_WAIT_URL"
"""What ``${{ wait.url }}`` reads as: the placeholder ``${RFLOW_WAIT_URL}``, which the
executor fills in with the resume URL of the webhook wait after the step (never part of
run state: the URL carries the wait's token)."""
WAIT_URL = placeholder(WAIT_URL_VARIABLE)


class Placeholder(str):
    """What ``${{ env.NAME }}`` reads: the text ``${NAME}``, which the effect's executor
    replaces with the variable's value. Unlike run data it is not escaped."""

    __slots__ = ()


def step_view(record: StepRecord) -> dict[str, Any]:
    """What ``${{ steps.<id> }}`` shows of a settled (or running) step."""
    output = record.output
    view: dict[str, Any] = {
        "status": str(record.status),
        "output": output,
        "error": record.error.view() if record.error else None,
    }
    if isinstance(output, Mapping) and "tx" in output:
        view["tx"] = output["tx"]
    return view


class StepsView(Mapping[str, dict[str, Any]]):
    """``${{ steps }}``: the view of each top-level step, built when an expression asks.

    Building every view up front costs a pass over all records (foreach iterations
    included) per evaluation; this costs one lookup per reference.
    """

    def __init__(self, records: Mapping[str, StepRecord]) -> None:
        self._records = records

    def __getitem__(self, step_id: str) -> dict[str, Any]:
        record = self._records.get(step_id)
        if record is None or record.path != record.step:
            raise KeyError(step_id)
        view = step_view(record)
        if record.saga is not None and record.error is None and record.saga.error is not None:
            # A try block at work on a failure (compensating, in catch): it is its error.
            view["error"] = record.saga.error.view()
        fork = record.fork
        if fork is not None:
            # A parallel's or race's branches, each as its own step, and a race's winner.
            view["branches"] = {
                branch: step_view(self._records[branch])
                for branch in fork.branches
                if branch in self._records
            }
            if fork.kind == "race":
                view["winner"] = fork.winner
        return view

    def __iter__(self) -> Iterator[str]:
        return (path for path, record in self._records.items() if path == record.step)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def run_context(
    state: RunState | Any,
    *,
    env: Iterable[str] = (),
    item: Any = _UNSET,
    item_index: int | None = None,
    error: StepError | None = None,
    run_status: str | None = None,
) -> dict[str, Any]:
    """The roots an expression of this run can read.

    ``state`` is a :class:`RunState` or anything with the same attributes (the engine
    passes its working copy, to avoid re-validating a whole run per evaluation). ``env``
    names the workflow's allow-listed variables; each reads as its :class:`Placeholder`.
    """
    context: dict[str, Any] = {
        "trigger": state.trigger,
        "inputs": state.trigger,
        "steps": StepsView(state.steps),
        "matrix": state.matrix or {},
        "run": {
            "id": state.run_id,
            "workflow": state.workflow,
            "version": state.version,
            "trigger_key": state.trigger_key,
            "status": run_status or str(state.status),
        },
        "state": state.state,
        "env": {name: Placeholder(placeholder(name)) for name in env},
        "wait": {"url": Placeholder(WAIT_URL)},
        "error": error.view() if error else (state.error.view() if state.error else None),
    }
    if item is not _UNSET:
        context["item"] = item
        context["item_index"] = item_index
    return context


@lru_cache(maxsize=4096)
def _template(text: str) -> Template:
    return parse_template(text)


def render(
    value: Any, context: Mapping[str, Any], finish: Callable[[Any], Any] | None = None
) -> Any:
    """``value`` with every ``${{ ... }}`` evaluated (each value passed through ``finish``
    when given); a failure is an ``invalid_input`` error."""
    if isinstance(value, str):
        if not has_expression(value):
            return value
        try:
            return _template(value).render(context, finish)
        except ExpressionError as exc:
            raise RflowError(FailureKind.INVALID_INPUT, f"{value!r}: {exc.message}") from None
    if isinstance(value, Mapping):
        return {key: render(item, context, finish) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(item, context, finish) for item in value]
    return value


def render_input(value: Any, context: Mapping[str, Any]) -> Any:
    """``value`` rendered as an effect's input: like :func:`render`, with every ``${`` in
    an expression's value escaped as ``$${`` (a :class:`Placeholder` excepted), so run
    data cannot name an environment variable. Text written in the definition is kept as
    it is: its ``${VAR}`` and ``$${`` are the executor's to read."""
    return render(value, context, escaped)


def mentions(value: Any, text: str) -> bool:
    """Whether any string in ``value`` (mapping keys included) contains ``text``."""
    if isinstance(value, str):
        return text in value
    if isinstance(value, Mapping):
        return any(mentions(key, text) or mentions(item, text) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(mentions(item, text) for item in value)
    return False


def escaped(value: Any) -> Any:
    """``value`` with ``${`` escaped in every string in it, keys included (a
    :class:`Placeholder` is kept, as plain text)."""
    if isinstance(value, Placeholder):
        return str(value)
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, Mapping):
        return {escaped(key): escaped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(item) for item in value]
    return value


def holds(condition: bool | str | None, context: Mapping[str, Any]) -> bool:
    """Whether an ``if:`` / ``retry_if`` / branch condition holds (absent: it does)."""
    if condition is None or isinstance(condition, bool):
        return condition is not False
    return _truthy(render(condition, context))


@lru_cache(maxsize=64)
def _operator(source: str) -> Expr:
    return parse(source)


_OPERATORS = {
    "equals": "item[0] == item[1]",
    "not_equals": "item[0] != item[1]",
    "greater_than": "item[0] > item[1]",
    "less_than": "item[0] < item[1]",
    "greater_equal": "item[0] >= item[1]",
    "less_equal": "item[0] <= item[1]",
    "contains": "contains(item[0], item[1])",
    "not_contains": "not contains(item[0], item[1])",
    "starts_with": "starts_with(item[0], item[1])",
    "ends_with": "ends_with(item[0], item[1])",
    "is_empty": "is_empty(item[0])",
    "is_not_empty": "is_not_empty(item[0])",
}
_NUMERIC = {"greater_than", "less_than", "greater_equal", "less_equal"}


def compare(op: str, left: Any, right: Any = None) -> bool:
    """A ``choose`` comparison, with the same semantics as the expression language.

    The ordering operators compare numerically, reading numeric strings as numbers
    (webhook and JSON payloads often carry amounts as strings).
    """
    if op in _NUMERIC:
        left, right = _number(left), _number(right)
    try:
        return _truthy(evaluate(_operator(_OPERATORS[op]), {"item": [left, right]}))
    except ExpressionError as exc:
        raise RflowError(FailureKind.INVALID_INPUT, f"{op}: {exc.message}") from None


def _number(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 0) if text.lower().startswith(("0x", "-0x")) else int(text)
        except ValueError:
            try:
                return Decimal(text)
            except InvalidOperation:
                return value
    return value


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {}) and not (
        isinstance(value, Decimal) and value == 0
    )
