"""What every HTTP ingress shares: replies, headers, the body size limit and JSON bodies.

Nothing here knows a web framework: an adapter hands over the path, the headers, the
raw body bytes and the query, and turns the :class:`Reply` into its response.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rflow.codecs import MAX_RECORD_BYTES, TriggerRecord, encode
from rflow.jsonlimits import MAX_DEPTH, nesting_depth

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The default limit on a request body (1 MiB)."""

RECORD_LIMIT = MAX_RECORD_BYTES - 16 * 1024
"""The largest encoded trigger record an ingress produces: below the codec's record
limit and Kafka's default message size, with room for the key and batch framing."""

# Credentials never reach a payload (payloads are stored and shown to operators).
_SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "x-hub-signature",
        "x-hub-signature-256",
        "x-hub-signature-512",
    }
)
_SECRET_WORDS = ("signature", "secret", "token", "password", "api-key", "apikey", "auth")


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, JSON body and extra response headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


def refuse(status: int, reason: str, *, retry_after: int | None = None) -> Reply:
    """An error reply whose body says why: ``{"error": reason}``.

    ``retry_after`` (seconds) is for answers the sender should retry (409, 503).
    """
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply(status, {"error": reason}, headers)


def lower_keys(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with lower-case names (HTTP header names are case-insensitive)."""
    return {name.lower(): value for name, value in headers.items()}


def payload_headers(headers: Mapping[str, str], *, drop: Iterable[str] = ()) -> dict[str, str]:
    """The headers a firing may carry: lower-case names, without credentials.

    ``drop`` names further headers to leave out (the webhook's own auth header).
    """
    dropped = _SECRET_HEADERS | {name.lower() for name in drop}
    kept = {}
    for name, value in lower_keys(headers).items():
        if name in dropped or any(word in name for word in _SECRET_WORDS):
            continue
        kept[name] = value
    return kept


def size_refusal(headers: Mapping[str, str], body: bytes, limit: int) -> Reply | None:
    """A 413 reply when the declared or actual body is over ``limit`` bytes, else None.

    ``headers`` must have lower-case names. An adapter that stops reading after
    ``limit + 1`` bytes passes what it read; the reply then gives no exact size.
    """
    declared = headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        return refuse(413, f"request body of {int(declared)} bytes is over the {limit}-byte limit")
    if len(body) > limit:
        return refuse(413, f"request body is over the {limit}-byte limit")
    return None


class BodyError(ValueError):
    """A request body that is not an acceptable JSON document; the message says why."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body``, or :class:`BodyError` with the parser's reason.

    The standard library's parser is used rather than the codec's because it keeps
    integers beyond 64 bits exact (wei amounts); the codec writes those as strings.
    NaN and infinities are refused: they are not JSON and no record could carry them.
    """
    if not body.strip():
        raise BodyError("body is not JSON: the body is empty")
    if nesting_depth(body) > MAX_DEPTH:
        raise BodyError(f"body is not JSON: it nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body, parse_float=_finite, parse_constant=_no_constants)
    except RecursionError:
        raise BodyError("body is not JSON: it is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, huge integers
        raise BodyError(f"body is not JSON: {exc}") from None


def json_document(body: bytes) -> dict[str, Any] | list[Any]:
    """The body as a JSON object or array (what a webhook sends), else :class:`BodyError`."""
    doc = parse_json(body)
    if not isinstance(doc, (dict, list)):
        raise BodyError(f"body must be a JSON object or array, got {json_type(doc)}")
    return doc


def json_type(value: Any) -> str:
    """What kind of JSON value ``value`` is, for messages ("an array", "a string")."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def record_refusal(record: TriggerRecord) -> Reply | None:
    """A 413 reply when ``record`` encodes to more than :data:`RECORD_LIMIT` bytes."""
    size = len(encode(record))
    if size > RECORD_LIMIT:
        return refuse(
            413,
            f"the firing would be a record of {size} bytes, over the {RECORD_LIMIT}-byte "
            "record limit; send a smaller body",
        )
    return None
