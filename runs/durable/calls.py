"""ctx.call: replay the call logged at its position, or make it and log it.

Read top to bottom, as DBOS's invoke_step reads: a logged outcome at the position is
returned (or raised) again without calling the tool; a call logged without an outcome
(in doubt, waiting to retry, retried by an operator) is decided on; a new call passes
the effect boundary and the gates, and its intent is written ahead unless the tool is
idempotent (its key makes a repeat harmless). Then attempts.invoke makes it under its
retry policy and logs the outcome. What replay knows is the step's ReplayState
(runs/durable/replay.py); an effect changes only by its moves (runs/durable/effect.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import clock, events
from . import records as r
from .attempts import invoke, retry_reason
from .effect import RETRY
from .errors import ApprovalDeniedError, CallRefusedError, InDoubtEffectError, Stop, Suspend
from .policies.gates import Allow, Refuse
from .retry import frees_the_worker

if TYPE_CHECKING:  # pragma: no cover
    from .registry import Tool
    from .step import Position, Step


def call(step: Step, tool: Tool, args, kwargs) -> Any:
    """`ctx.call(tool, *args, **kwargs)` at the step's next position."""
    position, recorded = step.next(r.CALL, tool.name, args, kwargs)
    return resolve(step, tool, position, recorded, args, kwargs)


def resolve(step: Step, tool: Tool, position: Position, recorded: r.EffectRecord | None,
            args, kwargs, *, digest_kwargs: dict | None = None) -> Any:
    """A call at its position: replayed, made again, or made. `digest_kwargs`: what a
    parallel call's digest covers besides its arguments (runs/durable/parallel.py)."""
    if recorded is not None and recorded.replays:
        step.host.observed.replayed(recorded)
        if recorded.status == r.ERROR:
            raise recorded.failure()
        return recorded.result
    if recorded is None:
        record = _begin(step, position, tool, args, kwargs, digest_kwargs)
    elif recorded.status == r.RETRYING:
        return _next_attempt(step, tool, recorded, args, kwargs)
    else:
        record = _again(step, position, tool, recorded, args, kwargs)
    if record.skipped:  # a gate's skip, logged
        return record.result
    return invoke(step, tool, record, args, kwargs)


def _begin(step: Step, position: Position, tool: Tool, args, kwargs,
           digest_kwargs: dict | None) -> r.EffectRecord:
    """A call that was never made: past the effect boundary, its intent logged first
    unless the tool is idempotent. The gates see the call's own arguments, never a
    parallel group's digest extras."""
    step.host.effect_boundary(settles=tool.idempotent)
    record = step.new_record(position, r.CALL, tool, args,
                             kwargs if digest_kwargs is None else digest_kwargs)
    _admit(step, tool, record, args, kwargs)
    if not tool.idempotent and record.status == r.INTENT:
        # The intent is what an operator reads of a call in doubt: it carries its start
        record.started_at = clock.now()
        step.host.log_effect(record)  # write-ahead intent
    return record


def _again(step: Step, position: Position, tool: Tool, recorded: r.EffectRecord, args,
           kwargs) -> r.EffectRecord:
    """A logged call without an outcome (in doubt), or one an operator said to retry:
    an idempotent tool is called again under the same key; a non-idempotent one
    only on the operator's word."""
    if not tool.idempotent and recorded.resolution != RETRY:
        if step.host.settles_cancel():  # nothing to settle by calling it
            raise Stop(r.CANCEL)
        error = InDoubtEffectError(position=position, tool=tool.name, key=recorded.key)
        error.record = recorded
        raise step.replay.halt(error)
    _admit(step, tool, recorded, args, kwargs)  # called again: the gates decide again
    if recorded.status == r.DONE:  # skipped
        return recorded
    if not tool.idempotent:
        recorded.retry_start(at=clock.now())
        step.host.log_effect(recorded)
    return recorded


def _next_attempt(step: Step, tool: Tool, record: r.EffectRecord, args, kwargs):
    """The next attempt of a call waiting out its retry policy on a durable timer.

    Woken early (a resume after a pause, a crash of another run's worker), it
    waits again until the recorded wake time: the same wait as the first time."""
    waiting = dict(record.result)
    remaining = waiting["wake_at"] - clock.now()
    if frees_the_worker(remaining):
        raise Suspend(wake_at=waiting["wake_at"], reason=retry_reason(record),
                      records=[], events=[])
    step.host.effect_boundary(settles=tool.idempotent)
    if remaining > 0:
        time.sleep(remaining)
    if not step.live:  # a shared limit counts this attempt too (before its intent)
        step.gates(tool, record, args, kwargs).admit_attempt()
    if not tool.idempotent:
        # This attempt may reach the target: until its outcome is logged, it is in doubt.
        record.attempt()
        step.host.log_effect(record)
    return invoke(step, tool, record, args, kwargs, first_at=waiting["first_at"])


def _admit(step: Step, tool: Tool, record: r.EffectRecord, args, kwargs) -> None:
    """Before anything of a call reaches the log or the world, the gates may let it
    through, hold the run (Held) or refuse it: a refusal is logged as the call's
    outcome (a deny raised in the step, a skip returning its result). on_resume's
    calls are never replayed, so they cannot be held: not gated."""
    if step.live:
        return
    decision = step.gates(tool, record, args, kwargs).admit()
    if isinstance(decision, Allow):
        if decision.note:
            step.host.emit(events.gate("allow", record, decision.note))
        return
    _refused(step, record, decision)


def _refused(step: Step, record: r.EffectRecord, decision: Refuse) -> None:
    if decision.fallback == "skip":
        record.skip(decision.result, at=clock.now())
        step.host.log_effect(record)
        return
    error_type = ApprovalDeniedError if decision.kind == "approval" else CallRefusedError
    record.refuse({"type": error_type.__name__, "message": decision.message[:2000],
                   "permanent": True, "gate": decision.kind, **decision.details},
                  at=clock.now())
    step.host.log_effect(record)
    raise record.failure()
