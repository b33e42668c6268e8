"""The base model and the scalar types shared by every part of the workflow language."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from rflow.lang.envsubst import has_placeholder
from rflow.lang.timespec import parse_cron, parse_timezone
from rflow.lang.units import (
    DURATION_PATTERN,
    UnitError,
    format_duration,
    parse_amount,
    parse_duration,
    parse_token_amount,
)

EXPR_OPEN = "${{"


class Model(BaseModel):
    """Base of every model: immutable, and unknown fields are errors.

    A field is documented by the docstring under it. Those are read when the JSON Schema
    or the reference is generated (:mod:`rflow.docstrings`), not as each class is
    created, and a model's validator is built when it is first used (``defer_build``):
    loading the language parses no source, and a project's validator is built once.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        serialize_by_alias=True,
        validate_by_alias=True,
        validate_by_name=True,
        hide_input_in_errors=False,
        defer_build=True,
    )


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``message`` (braces and all)."""
    return PydanticCustomError("rflow", "{message}", {"message": message})


def invalid_at(model: BaseModel, loc: tuple[str | int, ...], message: str) -> ValidationError:
    """A validation error of ``model`` located at its field ``loc`` (a model validator's
    own errors point at the whole model; this one points at the field that is wrong; an
    integer in ``loc`` is a list's index)."""
    value: Any = model
    for part in loc:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and part < len(value) else None
        else:
            value = getattr(value, part, None)
    details = InitErrorDetails(type=invalid(message), loc=loc, input=value)
    return ValidationError.from_exception_data(type(model).__name__, [details])


def describe(value: Any) -> str:
    """A short rendering of a YAML value for "got ..." in messages."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def exactly_one(model: BaseModel, names: tuple[str, ...], what: str) -> None:
    """Raise unless exactly one of the fields ``names`` of ``model`` is set."""
    given = [name for name in names if getattr(model, name) is not None]
    if len(given) != 1:
        listed = ", ".join(names[:-1]) + f" or {names[-1]}"
        found = f" (found {' and '.join(given)})" if given else ""
        raise invalid(f"{what} needs exactly one of {listed}{found}")


def word_or_map(value: Any) -> str:
    """A union discriminator: ``'word'`` for a string, ``'map'`` for anything else."""
    return "word" if isinstance(value, str) else "map"


def has_expression(value: object) -> bool:
    """True when ``value`` is a string holding a ``${{ ... }}`` expression."""
    return isinstance(value, str) and EXPR_OPEN in value


def known_when_run(value: object) -> bool:
    """True when ``value`` is a string whose final text is known only when the step runs:
    it holds an expression, or a ``${VAR}`` that the effect fills in."""
    return has_expression(value) or has_placeholder(value)


def _wrap(parse: Any) -> Any:
    def validate(value: Any) -> Any:
        try:
            return parse(value)
        except UnitError as exc:
            raise invalid(str(exc)) from None

    return validate


# --- names -------------------------------------------------------------------------

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
_NAME = re.compile(NAME_PATTERN)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise invalid(
            f"{value!r} is not a valid name: use letters, digits, '_' and '-', "
            "starting with a letter or '_'"
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise invalid(f"{value!r} is not an environment variable name (letters, digits and '_')")
    return value


def _name_or_expr(value: str) -> str:
    return value if has_expression(value) else _name(value)


Name = Annotated[
    str, AfterValidator(_name), WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})
]
"""A declared name: a network, contract, relayer, channel, budget, workflow or step id."""

NameRef = Annotated[
    str,
    AfterValidator(_name_or_expr),
    WithJsonSchema(
        {
            "type": "string",
            "description": "a declared name, or an expression such as ${{ matrix.network }}",
        }
    ),
]
"""A reference to a declared name, or an expression that evaluates to one at run time."""

EnvVar = Annotated[
    str, AfterValidator(_env_name), WithJsonSchema({"type": "string", "pattern": _ENV_NAME.pattern})
]
"""The name of an environment variable (its value is read when needed, never stored)."""


# --- expressions -------------------------------------------------------------------


def _expr(value: str) -> str:
    if not has_expression(value):
        raise invalid(f"expected an expression such as ${{{{ steps.plan.output }}}}, got {value!r}")
    return value


def _condition(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _expr(value)
    raise invalid(
        f"expected an expression such as ${{{{ steps.gate.output > 0 }}}} or true/false, got {value!r}"
    )


Expr = Annotated[
    str,
    AfterValidator(_expr),
    WithJsonSchema(
        {"type": "string", "pattern": r"\$\{\{", "description": "an expression: ${{ ... }}"}
    ),
]
"""A string that must hold a ``${{ ... }}`` expression."""

Condition = Annotated[
    bool | str,
    BeforeValidator(_condition),
    WithJsonSchema(
        {
            "anyOf": [{"type": "boolean"}, {"type": "string", "pattern": r"\$\{\{"}],
            "description": "true, false or ${{ expression }}",
        }
    ),
]
"""A boolean, or an expression evaluated for truth at run time."""


# --- money, time -------------------------------------------------------------------

_AMOUNT_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9][0-9_]*)?\s*([A-Za-z]+)?\s*$"},
    ],
    "description": "native value: an integer of wei, or a number with a unit such as 1 ether, 0.5 ether, 10 gwei",
    "examples": ["1 ether", "10 gwei", 1000],
}

Amount = Annotated[int, BeforeValidator(_wrap(parse_amount)), WithJsonSchema(_AMOUNT_SCHEMA)]
"""Native value in wei (an exact integer)."""


def _amount_or_expr(value: Any) -> Any:
    return value if known_when_run(value) else _wrap(parse_amount)(value)


AmountOrExpr = Annotated[
    int | str,
    BeforeValidator(_amount_or_expr),
    WithJsonSchema(
        {
            "anyOf": [*_AMOUNT_SCHEMA["anyOf"], {"type": "string", "pattern": r"\$\{\{"}],
            "description": "an amount (1 ether, 10 gwei, wei) or an expression",
        }
    ),
]
"""Native value in wei, or an expression evaluated at run time."""

TokenAmount = Annotated[
    int,
    BeforeValidator(_wrap(parse_token_amount)),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^[0-9][0-9_]*$"},
            ],
            "description": 'raw token units in the token\'s own decimals, e.g. "1000000"',
        }
    ),
]
"""An ERC20 amount in raw units."""


def _int_or_expr(value: Any) -> Any:
    if known_when_run(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise invalid(f"expected a non-negative integer or an expression, got {value!r}")


IntOrExpr = Annotated[
    int | str,
    BeforeValidator(_int_or_expr),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"\$\{\{"}]}
    ),
]
"""A non-negative integer, or an expression."""


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise invalid("a duration must be longer than zero")
    return value


Duration = Annotated[
    timedelta,
    BeforeValidator(_wrap(parse_duration)),
    AfterValidator(_positive),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "a duration: 500ms, 10s, 5m, 1h, 7d, '30 seconds', '2 hours'",
            "examples": ["10s", "1h", "24h"],
        }
    ),
]
"""A positive duration, read from ``10s``, ``1h30m``, ``2 hours`` and the like."""

DEDUP_WINDOW_MIN = timedelta(seconds=1)
DEDUP_WINDOW_MAX = timedelta(days=3650)


def _dedup_window(value: timedelta) -> timedelta:
    if value < DEDUP_WINDOW_MIN:
        raise invalid(
            f"a de-duplication window must be at least 1s (got {format_duration(value)}): "
            "a repeated delivery must still be recognised when it arrives"
        )
    if value > DEDUP_WINDOW_MAX:
        raise invalid(
            f"a de-duplication window must be at most 3650d (got {format_duration(value)}): "
            "what a worker remembers grows with it"
        )
    return value


DedupWindow = Annotated[Duration, AfterValidator(_dedup_window)]
"""How long a firing's trigger key is remembered: from 1s to 3650d."""

Cron = Annotated[
    str,
    AfterValidator(_wrap(parse_cron)),
    WithJsonSchema(
        {
            "type": "string",
            "description": "five-field cron (minute hour day month weekday) or @hourly, @daily, ...",
            "examples": ["0 * * * *", "@daily"],
        }
    ),
]
"""A five-field cron expression or a macro such as ``@hourly``."""

TimeZone = Annotated[
    str,
    AfterValidator(_wrap(parse_timezone)),
    WithJsonSchema(
        {"type": "string", "description": "an IANA time zone", "examples": ["UTC", "Europe/Paris"]}
    ),
]
"""An IANA time zone name."""

ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"
_ADDRESS = re.compile(ADDRESS_PATTERN)


def _address(value: Any) -> Any:
    if isinstance(value, str) and _ADDRESS.match(value):
        return value
    raise invalid(f"expected an address (0x and 40 hex digits), got {value!r}")


def _address_or_expr(value: Any) -> Any:
    return value if known_when_run(value) else _address(value)


Address = Annotated[
    str, BeforeValidator(_address), WithJsonSchema({"type": "string", "pattern": ADDRESS_PATTERN})
]
"""A 20-byte hex address."""

AddressOrExpr = Annotated[
    str,
    BeforeValidator(_address_or_expr),
    WithJsonSchema({"type": "string", "description": "an address (0x...) or an expression"}),
]
"""An address, or an expression evaluated to one at run time."""


def by_key(*keys: str) -> Any:
    """A union discriminator: the one of ``keys`` present in a mapping (``None`` if not one).

    Steps and triggers are told apart by which action key they hold rather than by a
    ``type`` field, as people write them; model instances report their ``kind``.
    """

    def tag(value: Any) -> str | None:
        if isinstance(value, dict):
            present = [key for key in keys if key in value]
            return present[0] if len(present) == 1 else None
        return getattr(value, "kind", None)

    return tag
