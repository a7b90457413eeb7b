"""Edits of a run's state as JSON Patches (RFC 6902), applied by the `jsonpatch` library.

An operator edits a path of a state that may be megabytes long, so an edit is a patch,
never the whole document; a patch that does not fit the state it was written for
(a path that is not there, a parent missing for "add", a failed "test") is refused
whole, and so is one whose result is not a JSON object (the engine's states are).
"""

from __future__ import annotations

import jsonpatch
import jsonpointer

from .errors import StaleEditError, StatePatchError

OPS = ("replace", "add", "remove")
MESSAGE_CHARS = 200


def path_edit(op: str, path: str, value=None) -> list[dict]:
    """The patch of one edit at one path (a JSON Pointer)."""
    if op not in OPS:
        raise StatePatchError(f"the operation must be one of {', '.join(OPS)}", field=path)
    return [{"op": op, "path": path}] if op == "remove" else [
        {"op": op, "path": path, "value": value}]


def parse_patch(patch) -> jsonpatch.JsonPatch:
    """The patch as the library's operations: a list of objects, each with a known
    "op" and a "path" (StatePatchError otherwise); a missing "value" shows on applying."""
    try:
        return jsonpatch.JsonPatch(patch)
    except jsonpatch.InvalidJsonPatch as exc:
        raise StatePatchError(f"not a valid JSON Patch: {_short(exc)}",
                              field=_first_path(patch)) from None


def apply_patch(state: dict, patch) -> dict:
    """`state` with `patch` applied (the state itself is left as it is)."""
    operations = parse_patch(patch)
    try:
        result = operations.apply(state, in_place=False)
    except jsonpatch.InvalidJsonPatch as exc:
        raise StatePatchError(f"not a valid JSON Patch: {_short(exc)}",
                              field=_first_path(patch)) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise StatePatchError(f"the edit does not apply to the state: {_short(exc)}",
                              field=_first_path(patch)) from None
    if not isinstance(result, dict):
        raise StatePatchError("the edited state must stay a JSON object ({...})",
                              field=_first_path(patch))
    return result


def check_fresh(run_id: str, prepared_on: int | None, latest: int) -> None:
    """An edit prepared on a checkpoint other than the latest would land on a state
    the operator has not seen: refused (None: not prepared on a shown state)."""
    if prepared_on is not None and prepared_on != latest:
        raise StaleEditError(run_id, prepared_on, latest)


def paths_of(patch) -> list[str]:
    """The paths a patch touches, for the audit trail (StatePatchError if it is no patch)."""
    parse_patch(patch)
    return [op["path"] for op in patch]


def _short(exc: Exception) -> str:
    # jsonpointer quotes the whole document it searched: megabytes, for a big state
    text = str(exc)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


def _first_path(patch) -> str:
    if isinstance(patch, list) and patch and isinstance(patch[0], dict):
        return str(patch[0].get("path", ""))
    return ""
