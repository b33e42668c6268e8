"""Limits on untrusted JSON, checked before any parser sees it."""

from __future__ import annotations

import re

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
MAX_DEPTH = 512
"""Nesting accepted before parsing: deeper documents are refused, never parsed, because
the standard library's C parser can exhaust the stack long before Python's recursion
limit notices."""


def nesting_depth(data: bytes | str) -> int:
    """How deeply ``data``'s arrays and objects nest (brackets inside strings ignored)."""
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= 1:
        return raw.count(b"[") + raw.count(b"{")
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub(b'""', raw)):
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest
