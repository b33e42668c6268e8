"""The tokenizer: source text to a list of tokens with their offsets."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from rflow.expr.errors import limit_error, syntax_error
from rflow.expr.limits import MAX_INT

TokenKind = Literal["number", "string", "name", "op", "end"]

# Longest first, so that '//' wins over '/' and '<=' over '<'.
_OPERATORS = (
    "//", "==", "!=", "<=", ">=", "&&", "||",
    "(", ")", "[", "]", "{", "}", ",", ":", ".", "+", "-", "*", "/", "%", "<", ">", "!",
)  # fmt: skip
_OPERATOR_STARTS = frozenset(op[0] for op in _OPERATORS)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS = _NAME_START | _DIGITS
_STEP_ID_CHARS = _NAME_CHARS | {"-"}
_SPACE = frozenset(" \t\r\n")
_STRING_SPECIALS = {"'": re.compile(r"['\\]"), '"': re.compile(r'["\\]')}

# A decimal literal with more digits than this cannot be within MAX_INT; refusing it
# early keeps int() away from pathological digit strings.
_MAX_DECIMAL_DIGITS = len(str(MAX_INT))
_MAX_HEX_DIGITS = MAX_INT.bit_length() // 4 + 1


@dataclass(frozen=True, slots=True)
class Token:
    """One token; ``value`` is the parsed literal for numbers and strings, else the text."""

    kind: TokenKind
    value: int | Decimal | str
    offset: int

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind == "end":
            return "end of expression"
        if self.kind == "string":
            return "a string"
        if self.kind == "number":
            return "a number"
        return f"'{self.value}'"


def tokenize(source: str, base: int = 0) -> list[Token]:
    """The tokens of ``source``, ending with an ``end`` token.

    Offsets are ``base`` plus the position in ``source``, so that a template can report
    positions relative to its whole text.
    """
    tokens: list[Token] = []
    pos = 0
    length = len(source)
    while True:
        while pos < length and source[pos] in _SPACE:
            pos += 1
        if pos >= length:
            tokens.append(Token("end", "", base + length))
            return tokens
        char = source[pos]
        if char in _DIGITS:
            token, pos = _number(source, pos, base)
        elif char in _NAME_START:
            chars = _STEP_ID_CHARS if _after_steps(tokens) else _NAME_CHARS
            end = pos + 1
            while end < length and source[end] in chars:
                end += 1
            token, pos = Token("name", source[pos:end], base + pos), end
        elif char in "'\"":
            token, pos = _string(source, pos, base)
        elif char in _OPERATOR_STARTS:
            op = next((op for op in _OPERATORS if source.startswith(op, pos)), None)
            if op is None:
                raise syntax_error(_unexpected(char), base + pos)
            token, pos = Token("op", op, base + pos), pos + len(op)
        else:
            raise syntax_error(_unexpected(char), base + pos)
        tokens.append(token)


def _after_steps(tokens: list[Token]) -> bool:
    """Whether the next name is a step id: it follows ``steps.``, ``steps`` being the root
    (not a member named so, as in ``trigger.steps.x``).

    A step id may hold ``-`` (``first-step``), as GitHub Actions reads ``steps.<id>``:
    there the name runs on through hyphens, so ``steps.x-y`` is the step ``x-y``, and a
    subtraction is written with spaces, ``steps.x - y``. Everywhere else ``-`` is an
    operator, spaces or not.
    """
    return (
        len(tokens) >= 2
        and tokens[-1].kind == "op"
        and tokens[-1].value == "."
        and tokens[-2].kind == "name"
        and tokens[-2].value == "steps"
        and not (len(tokens) >= 3 and tokens[-3].kind == "op" and tokens[-3].value == ".")
    )


def _unexpected(char: str) -> str:
    if char == "=":
        return "unexpected '=' — did you mean '=='?"
    if char in "&|":
        return f"unexpected '{char}' — did you mean '{char * 2}'?"
    if char.isprintable():
        return f"unexpected character '{char}'"
    return f"unexpected character U+{ord(char):04X}"


def _number(source: str, start: int, base: int) -> tuple[Token, int]:
    length = len(source)
    pos = start
    if source.startswith(("0x", "0X"), start):
        pos = start + 2
        while pos < length and source[pos] in _HEX_DIGITS:
            pos += 1
        digits = source[start + 2 : pos]
        if not digits:
            raise syntax_error("invalid hex literal: expected digits after '0x'", base + start)
        if len(digits.lstrip("0")) > _MAX_HEX_DIGITS:
            raise limit_error("integer literal exceeds the limit of 2**1024", base + start)
        value: int | Decimal = int(digits, 16)
    else:
        while pos < length and source[pos] in _DIGITS:
            pos += 1
        is_decimal = pos + 1 < length and source[pos] == "." and source[pos + 1] in _DIGITS
        if is_decimal:
            pos += 1
            while pos < length and source[pos] in _DIGITS:
                pos += 1
        text = source[start:pos]
        if len(text.split(".")[0].lstrip("0")) > _MAX_DECIMAL_DIGITS:
            raise limit_error("number literal exceeds the limit of 2**1024", base + start)
        value = Decimal(text) if is_decimal else int(text)
    if pos < length and source[pos] in _NAME_CHARS:
        end = pos
        while end < length and source[end] in _NAME_CHARS:
            end += 1
        raise syntax_error(f"invalid number literal '{source[start:end]}'", base + start)
    if isinstance(value, int) and value > MAX_INT:
        raise limit_error("integer literal exceeds the limit of 2**1024", base + start)
    return Token("number", value, base + start), pos


def _string(source: str, start: int, base: int) -> tuple[Token, int]:
    quote_char = source[start]
    specials = _STRING_SPECIALS[quote_char]
    out: list[str] = []
    pos = start + 1
    while True:
        match = specials.search(source, pos)
        if match is None or (match.group() == "\\" and match.end() == len(source)):
            raise syntax_error("unterminated string literal", base + start)
        end = match.start()
        out.append(source[pos:end])
        if source[end] == quote_char:
            return Token("string", "".join(out), base + start), end + 1
        char, pos = _escape(source, end, base)
        out.append(char)


def _escape(source: str, pos: int, base: int) -> tuple[str, int]:
    """The character an escape at ``pos`` (a backslash) stands for, and where it ends."""
    code = source[pos + 1]
    if code in _ESCAPES:
        return _ESCAPES[code], pos + 2
    if code != "u":
        shown = code if code.isprintable() else f"U+{ord(code):04X}"
        raise syntax_error(f"invalid escape '\\{shown}' in string literal", base + pos)
    high = _hex4(source, pos, base)
    if not 0xD800 <= high <= 0xDFFF:
        return chr(high), pos + 6
    # Surrogates only make sense as a pair; a lone one could not be encoded as UTF-8.
    if high <= 0xDBFF and source.startswith("\\u", pos + 6):
        low = _hex4(source, pos + 6, base)
        if 0xDC00 <= low <= 0xDFFF:
            return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), pos + 12
    raise syntax_error("invalid '\\u' escape: unpaired surrogate", base + pos)


def _hex4(source: str, pos: int, base: int) -> int:
    digits = source[pos + 2 : pos + 6]
    if len(digits) != 4 or not all(d in _HEX_DIGITS for d in digits):
        raise syntax_error("invalid '\\u' escape: expected 4 hex digits", base + pos)
    return int(digits, 16)
