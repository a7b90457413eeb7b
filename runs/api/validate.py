"""The operator pages' forms decide what an operator's request may hold (a reason,
a checkpoint, a resolution), so the API, the CLI and the pages refuse the same input."""

from __future__ import annotations

import json

from ninja.errors import HttpError

from runs.operator.forms import ReasonForm, ResolveForm, RollbackForm


def valid(form) -> dict:
    if form.is_valid():
        return form.cleaned_data
    errors = [{"loc": [] if field == "__all__" else [field], "msg": str(message)}
              for field, messages in form.errors.items() for message in messages]
    text = "; ".join(f"{'.'.join(e['loc']) + ': ' if e['loc'] else ''}{e['msg']}"
                     for e in errors)
    raise HttpError(422, text)


def reason_of(reason: str) -> str:
    return valid(ReasonForm({"reason": reason}))["reason"]


def rollback_of(checkpoint: int, reason: str, then: str | None) -> dict:
    return valid(RollbackForm({"checkpoint": checkpoint, "reason": reason,
                               "then": then or "resume"}))


def resolve_of(seq: int, resolution: str, result, reason: str) -> dict:
    return valid(ResolveForm({"seq": seq, "resolution": resolution,
                              "result": json.dumps(result), "reason": reason}))
