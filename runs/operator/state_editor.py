"""What the state editor shows of a state of any size: the children of one path with
their sizes, the value at that path (cut short past a limit), and the diff an edit
makes, of the paths it touches only (never a diff of the whole document)."""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass

import jsonpointer

CHILDREN_SHOWN = 200
VALUE_SHOWN_BYTES = 64 * 1024
DIFF_LINES_SHOWN = 400


@dataclass
class Child:
    key: str
    path: str
    kind: str
    size: int


@dataclass
class Change:
    op: str
    path: str
    lines: list[str]
    cut: int  # diff lines left out


def preview_token(checkpoint: int, patch: list[dict]) -> str:
    """Names the edit a preview showed: Confirm applies that edit only, so a path or
    value changed after the preview is previewed again, not applied unseen (a guard
    for the operator, not a secret: the operator may send any edit anyway)."""
    text = json.dumps([checkpoint, patch], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def value_at(state, path: str):
    """The value at a JSON Pointer; LookupError when the path is not there."""
    try:
        return jsonpointer.resolve_pointer(state, path)
    except jsonpointer.JsonPointerException as exc:
        raise LookupError(path) from exc


def children(value, path: str) -> tuple[list[Child], int]:
    """The first children of an object or array, with their JSON sizes; and how many."""
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else [])
    shown = []
    for key, child in items:
        if len(shown) == CHILDREN_SHOWN:
            break
        shown.append(Child(str(key), f"{path}/{jsonpointer.escape(str(key))}", kind(child),
                           len(dumps(child).encode())))
    return shown, len(value) if isinstance(value, (dict, list)) else 0


def kind(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number")


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def shown_text(value) -> tuple[str, bool]:
    """The value as pretty JSON, cut at VALUE_SHOWN_BYTES: (text, whether it was cut)."""
    text = pretty(value)
    if len(text) <= VALUE_SHOWN_BYTES:
        return text, False
    return text[:VALUE_SHOWN_BYTES], True


def changes(before: dict, after: dict, patch: list[dict]) -> list[Change]:
    """Per operation, a unified diff of the value at its path, before and after (and,
    for a move, at the path it leaves)."""
    shown = []
    for op in patch:
        shown.append(_change(before, after, op))
        if op["op"] == "move":
            shown.append(_change(before, after, {"op": "move (from)", "path": op["from"]}))
    return shown


def _change(before, after, op) -> Change:
    shown = _in_context(before, op["path"])
    diff = list(difflib.unified_diff(_lines(before, shown), _lines(after, shown),
                                     fromfile=f"{shown or '/'} (now)",
                                     tofile=f"{shown or '/'} (edited)", lineterm="", n=3))
    return Change(op["op"], op["path"], diff[:DIFF_LINES_SHOWN],
                  max(0, len(diff) - DIFF_LINES_SHOWN))


def _in_context(state, path: str) -> str:
    """The path's parent when it is small enough to show (the change in its place),
    else the path itself: a diff of one page, not of the list of ten thousand."""
    if not path:
        return path
    parent = path.rsplit("/", 1)[0]
    try:
        small = len(dumps(value_at(state, parent))) <= VALUE_SHOWN_BYTES
    except LookupError:
        return path
    return parent if small else path


def _lines(state, path) -> list[str]:
    try:
        return pretty(value_at(state, path)).splitlines()
    except LookupError:
        return []  # added, or removed: nothing on that side
