"""The events a run's viewers see, one builder per kind: an event is `(kind, data)`.

Everything that writes an event (the context, the session, the operator's actions,
the stores) builds it here, so a kind has one shape wherever it is written; the
live page and the CLI read these shapes (static/js/run.js, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Any

from . import records as r

Event = tuple[str, dict]


def status(status: str, **details) -> Event:
    """The run's status changed (or it resumed): `details` say why, as the page shows."""
    return ("status", {"status": status, **details})


def control(action: str) -> Event:
    """An operator's request (pause, cancel, resume) that the worker honours later."""
    return ("control", {"action": action})


def effect(record: r.EffectRecord) -> Event:
    """A call's intent or outcome was logged."""
    duration = None
    if record.finished_at and record.started_at:
        duration = round((record.finished_at - record.started_at) * 1000, 2)
    data = {"step": record.step_no, "seq": record.seq, "branch": record.branch,
            "tool": record.tool, "key": record.key, "status": record.status,
            "idempotent": record.idempotent, "ms": duration, "kind": record.kind}
    if record.usage:  # a metered call: what it used (docs/budgets.md)
        data.update(model=record.usage["model"], cost=record.usage["cost"],
                    tokens=record.usage["prompt_tokens"] + record.usage["completion_tokens"])
    if record.resolution == "refused" and record.error:  # a gate said no (docs/approvals.md)
        data.update(refused=record.error.get("message", ""))
    return ("effect", data)


def gate(kind: str, record: r.EffectRecord, note: dict) -> Event:
    """A gate let a call through with a note (which approval, approved by whom)."""
    return ("gate", {"gate": kind, "step": record.step_no, "seq": record.seq,
                     "tool": record.tool, **note})


def stream(record: r.EffectRecord, attempt: str, offset: int, text: str) -> Event:
    """A batch of a streaming call's text: `offset` characters into `attempt`'s text
    (runs/durable/streaming.py; static/js/conversation.js draws it)."""
    return ("stream", {"key": record.key, "attempt": attempt, "tool": record.tool,
                       "step": record.step_no, "seq": record.seq, "branch": record.branch,
                       "offset": offset, "text": text})


def resolved(record: r.EffectRecord, resolution: str) -> Event:
    """An operator settled a call (done, skip, retry, give_up)."""
    return ("effect", {"step": record.step_no, "seq": record.seq, "tool": record.tool,
                       "key": record.key, "status": record.status, "resolution": resolution})


def attempt(record: r.EffectRecord, error: str, retry_in: float | None) -> Event:
    """An attempt of a call failed; `retry_in` is None when it is not tried again."""
    return ("attempt", {"step": record.step_no, "seq": record.seq, "tool": record.tool,
                        "attempt": record.attempts, "error": error,
                        "retry_in": None if retry_in is None else round(retry_in, 3)})


def checkpoint(record: r.CheckpointRecord, number: int | None) -> Event:
    """A checkpoint was written: its number, and nothing the checkpoint's row holds (its
    branch, step, size and reason are read from there: runs/selectors.py,
    with_checkpoints). The number is the store's to give (the run's count of
    checkpoints in the same transaction): a store whose SQL numbers it passes None and
    sets "number" in the statement (runs/storage/pg.py)."""
    return ("checkpoint", {"number": number})


def forked(reason: str, target: r.CheckpointRecord, branch: int) -> Event:
    """A rollback or an edit started `branch` from checkpoint `target` (the kind is the
    action: "rollback", "edit", ...)."""
    return (reason, {"from_checkpoint": target.number, "branch": branch,
                     "step": target.step_no})


def version_moved(*, from_version: str, from_code: str, to_version: str, to_code: str,
                  step: int, how: str, replayed_steps: int, effects: int) -> Event:
    """The run moved to another code of its agent (runs/durable/upgrade.py): `how` is
    "replay" (a clean replay at a claim) or "operator" (an upgrade)."""
    return ("version", {"from_version": from_version, "from_code": from_code,
                        "to_version": to_version, "to_code": to_code, "step": step,
                        "how": how, "replayed_steps": replayed_steps, "effects": effects})


def spawned(run_id: str, agent: str, key: str) -> Event:
    """The run launched a child run (docs/children.md)."""
    return ("child", {"run_id": run_id, "agent": agent, "key": key})


def log(step: int, message: str) -> Event:
    return ("log", {"step": step, "message": message})


def progress(done: float, total: float, message: str) -> Event:
    return ("progress", {"done": done, "total": total, "message": message})


def input_requested(prompt: str, schema: dict | None, *, step: int, seq: int) -> Event:
    return ("input_requested", {"prompt": prompt, "schema": schema, "seq": seq, "step": step})


def input_received(record: r.EffectRecord) -> Event:
    return ("input_received", {"seq": record.seq, "step": record.step_no,
                               "value": record.result})


def budget(budget: dict) -> Event:
    """A run's budget changed (docs/budgets.md)."""
    return ("budget", {"budget": budget})


def audit(action: str, actor: str, reason: str, **details) -> Event:
    return ("audit", {"action": action, "actor": actor, "reason": reason, **details})


def output(value: Any) -> Event:
    return ("output", {"output": value})
