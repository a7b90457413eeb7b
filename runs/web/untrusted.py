"""The one place where untrusted JSON and text are parsed and checked.

Every form field that takes JSON, every websocket message, the CLI's JSON arguments
and the query-parameter guard (runs/web/query_guard.py) go through here, so one set of
limits holds everywhere (docs/security.md):

- size: the caller's limit in UTF-8 bytes, checked before parsing;
- depth: at most MAX_DEPTH nested arrays/objects, checked before parsing, so no
  parser recursion (Python's `json` raises RecursionError, not ValueError, past ~1000);
- text: no NUL (PostgreSQL text and jsonb cannot hold it) and no lone surrogate
  (`"\\ud800"` decodes to a str that cannot be encoded as UTF-8), in keys and values;
- numbers: finite only (`NaN`, `Infinity` and `1e999` are refused: JSON has no
  such values and PostgreSQL's jsonb refuses them).

Each refusal is an UntrustedInputError subclass with a message meant for the user.
"""

from __future__ import annotations

import json
import math
import re

MAX_DEPTH = 64
# A run ID: 1-32 URL-safe characters (the engine mints uuid4 hex). The URL converter
# and every run id read from a form, a cursor or a websocket message use this.
RUN_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")

# A string, or an unterminated one up to the end: possessive, so each character is read
# once (a backtracking pattern is quadratic on '"\\"\\"\\...').
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKETS = re.compile(r"[^\[\]{}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


class UntrustedInputError(ValueError):
    """Input refused before it reached the engine or the database."""


class NotJSONError(UntrustedInputError):
    pass


class TooLargeError(UntrustedInputError):
    pass


class TooDeepError(UntrustedInputError):
    pass


class NonFiniteNumberError(UntrustedInputError):
    pass


class BadTextError(UntrustedInputError):
    """A NUL character or a lone surrogate."""


def check_text(text: str, what: str = "the text") -> str:
    """`text` unchanged, or BadTextError if it holds a NUL or a lone surrogate."""
    if "\x00" in text:
        raise BadTextError(f"{what} contains a NUL character (\\u0000), which is not allowed")
    if _SURROGATE.search(text):
        raise BadTextError(f"{what} contains a lone surrogate (\\ud800-\\udfff), "
                           "which is not valid Unicode")
    return text


def is_clean(text: str) -> bool:
    """check_text as a test: no NUL, no lone surrogate."""
    return "\x00" not in text and not _SURROGATE.search(text)


def is_run_id(value) -> bool:
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def check_size(text: str, max_bytes: int) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise TooLargeError(f"too large: {size} bytes, at most {max_bytes} bytes")


def _depth(text: str) -> int:
    """Nesting depth of JSON text, without parsing it (strings skipped)."""
    depth = deepest = 0
    for char in _BRACKETS.sub("", _STRING.sub("", text)):
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise NonFiniteNumberError(f"the number {token[:40]} is out of range")
    return value


def _no_constants(token: str):
    raise NonFiniteNumberError(f"{token} is not a JSON number")


def parse_json(text: str, *, max_bytes: int, max_depth: int = MAX_DEPTH):
    """Parse untrusted JSON text and check every limit above; returns the value."""
    check_size(text, max_bytes)
    if _depth(text) > max_depth:
        raise TooDeepError(f"nested too deeply: at most {max_depth} levels of arrays "
                           "and objects")
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constants)
    except UntrustedInputError:
        raise
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        where = f" (line {exc.lineno}, column {exc.colno})" if hasattr(exc, "lineno") else ""
        message = exc.msg if hasattr(exc, "msg") else str(exc)
        raise NotJSONError(f"not valid JSON: {message}{where}") from None
    check_value(value)
    return value


def parse_json_bytes(raw: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH):
    """parse_json for a request body: UTF-8 bytes."""
    if len(raw) > max_bytes:
        raise TooLargeError(f"too large: {len(raw)} bytes, at most {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotJSONError("not valid JSON: the body is not UTF-8") from None
    return parse_json(text, max_bytes=max_bytes, max_depth=max_depth)


def check_value(value, where: str = "") -> None:
    """Check every string (keys too) of a parsed value; iterative, so depth is no issue."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            check_text(item, f"the string at {path or 'the top'}")
        elif isinstance(item, float) and not math.isfinite(item):
            raise NonFiniteNumberError(f"the number at {path or 'the top'} is out of range")
        elif isinstance(item, dict):
            for key, inner in item.items():
                check_text(str(key), f"a key at {path or 'the top'}")
                stack.append((inner, (f"{path}.{key}" if path else str(key))[:80]))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}[{i}]") for i, inner in enumerate(item))
