"""Where an ``http_call`` may go: the workflow's ``permissions.http_hosts``.

Pure: the check runs on the URL as rendered, so no expression can steer a call past it,
and the executor never follows redirects.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from rflow.failures import FailureKind, RflowError


def check_url(url: str, allowed: Sequence[str] | None) -> None:
    """``permission_denied`` unless ``url`` is http(s) and its host is in ``allowed``
    (``None`` allows any host)."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError as exc:
        raise RflowError(FailureKind.INVALID_INPUT, f"http_call.url: {exc}: {url!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise RflowError(
            FailureKind.INVALID_INPUT, f"http_call.url: expected an http(s) URL, got {url!r}"
        )
    if allowed is None or any(_matches(host, port, pattern) for pattern in allowed):
        return
    raise RflowError(
        FailureKind.PERMISSION_DENIED,
        f"http_call to {host}{f':{port}' if port else ''} is not allowed by "
        f"permissions.http_hosts ({', '.join(allowed) or 'none'})",
    )


def _matches(host: str, port: int | None, pattern: str) -> bool:
    name, _, wanted = pattern.lower().partition(":")
    if wanted and port != int(wanted):
        return False
    if name.startswith("*."):
        return host.endswith(name[1:]) and host != name[2:]
    return host == name
