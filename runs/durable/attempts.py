"""Making a call: its attempts under the tool's retry policy, and its outcome logged.

What runs/durable/calls.py hands over once a call may be made (its intent, if any, is
in the log): the tool is called; a failed attempt is tried again after the policy's
wait, in the worker when the wait is short, as a durable timer when it is not
(the run gives its worker up: Suspend); the outcome is logged and handed to the
step, or the call is in doubt (a non-idempotent attempt that may have reached the
target). The gates hear of every attempt that fails and ends (gatekeeper.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import clock, events, streaming
from . import records as r
from .config import store_faults_end_the_session
from .effect import error_data
from .errors import FencedError, Held, InDoubtEffectError, Suspend
from .faults import faults
from .parallel_slots import call_returned
from .policies import metering
from .retry import frees_the_worker, outcome_unknown, retry_after, retryable
from .serde import canonical, check_serializable

if TYPE_CHECKING:  # pragma: no cover
    from .gatekeeper import CallGates
    from .registry import Tool
    from .step import Step


def invoke(step: Step, tool: Tool, record: r.EffectRecord, args, kwargs, *,
           first_at: float | None = None):
    """Call the tool (its attempts under its policy) and log the outcome. `first_at`: when
    the call's first attempt started, for the next attempt after a durable wait."""
    gates = step.gates(tool, record, args, kwargs)
    with step.host.observed.effect(record):  # a span, the latency, the log context
        try:
            _before(step, tool, record, first_at)
            try:
                result, error = _attempts(step, gates, tool, record, args, kwargs)
            finally:
                call_returned()
            return _outcome(step, tool, record, result, error, args, kwargs)
        finally:  # a slot of a shared limit is given back however the call ended
            gates.attempt_ended()


def _before(step: Step, tool: Tool, record: r.EffectRecord, first_at: float | None) -> None:
    """The last instant before the outside world is touched: the intent (if any) is
    logged and the lease is ours."""
    step.replay.settled()
    step.host.ensure_lease()
    faults.hit("before_effect", step.tag(tool))
    if first_at is None:  # a first attempt (not the next one after a durable wait)
        record.started_at, record.attempts = clock.now(), 0


def _attempts(step: Step, gates: CallGates, tool: Tool, record: r.EffectRecord, args, kwargs):
    """(result, None) or (None, the last error): attempts until one succeeds or the
    policy gives up. A wait too long to block on leaves as a durable timer."""
    call_kwargs = dict(kwargs, idempotency_key=record.key) if tool.idempotent else kwargs
    before_tool = step.host.config.before_tool
    while True:
        record.attempts += 1
        try:
            if before_tool is not None:
                before_tool()
            result = tool.fn(*args, **call_kwargs)
            if tool.stream:  # chunks to the viewers as they come, the result logged
                result = streaming.drain(step.host, record, result)
            check_serializable(result, f"result of {tool.name}")
            return result, None
        except FencedError:  # a streamed batch was refused: not the tool's failure
            raise
        except Exception as exc:  # a tool's failure is data: logged, replayed
            wait = _next_wait(step, gates, tool, record, exc)
            if wait is None:
                return None, exc
            if frees_the_worker(wait):
                faults.hit("before_retry_wait", step.tag(tool))
                raise _retry_later(record, exc, wait) from exc
            gates.attempt_ended()  # this attempt's request is over
            time.sleep(wait)
            step.host.ensure_lease()
            _admit_next_attempt(step, gates, record, exc)


def _admit_next_attempt(step: Step, gates: CallGates, record: r.EffectRecord,
                        exc: Exception) -> None:
    """An attempt after a short wait is one more request to the world, as one after a
    durable wait is: the gates that count every attempt (a shared limit) are asked
    again. Held, the call becomes a durable retry due at once, so that once the hold
    is over the replay asks them again before the attempt (calls._next_attempt)."""
    if step.live:
        return
    try:
        gates.admit_attempt()
    except Held:
        record.retry_at(error_data(exc, permanent=False), wake_at=clock.now())
        step.host.log_effect(record)
        raise


def _outcome(step: Step, tool: Tool, record: r.EffectRecord, result, error, args, kwargs):
    """The tool returned (or failed for good): log the outcome, hand it to the step."""
    if error is not None and outcome_unknown(error, idempotent=tool.idempotent) \
            and not step.live:
        raise _in_doubt(step, record, error) from error
    now = clock.now()
    usage = None
    if error is None:
        result = canonical(result)  # what a replay of it will return
        record.succeed(result, at=now)
        usage = _meter(step, tool, record, result, args, kwargs)
    else:
        record.fail(error_data(error, permanent=not retryable(error, idempotent=True)), at=now)
    faults.hit("after_effect_before_log", step.tag(tool))
    step.host.log_effect(record, usage=usage)
    if error is not None:
        raise record.failure() from error
    return result


def _meter(step: Step, tool: Tool, record: r.EffectRecord, result, args, kwargs) -> dict | None:
    """A metered call's usage, on its record; the session adds it to the run's totals
    in the commit of its outcome, so that a replay (which returns the logged result)
    never counts it again (runs/durable/policies/metering.py)."""
    if tool.meter is None:
        return None
    config = step.host.config
    with store_faults_end_the_session(config):  # the price table may be the database's
        record.usage = metering.measure(tool, result, tool.arguments(args, kwargs),
                                        config.price)
    return record.usage


def _in_doubt(step: Step, record: r.EffectRecord, exc: Exception) -> InDoubtEffectError:
    """Halt the run on a call that may have happened: its intent stays without an
    outcome (with the error, for the operator), as if the worker had died in it."""
    record.in_doubt(error_data(exc, permanent=False))
    step.host.log_effect(record)
    error = InDoubtEffectError(position=record.position, tool=record.tool, key=record.key,
                               error=describe_error(exc))
    error.record = record
    return step.replay.halt(error)


def _next_wait(step: Step, gates: CallGates, tool: Tool, record: r.EffectRecord,
               exc: Exception) -> float | None:
    """Seconds until the next attempt, or None: the error is final. Each failed
    attempt is an event."""
    gates.attempt_failed(exc)
    wait = None
    if retryable(exc, idempotent=tool.idempotent):
        wait = tool.retry.next_wait(record.attempts, first_at=record.started_at,
                                    now=clock.now(), key=record.key,
                                    retry_after=retry_after(exc))
    if wait is not None and frees_the_worker(wait) and step.live:
        wait = None  # on_resume's calls are never replayed, so they cannot wait durably
    step.host.observed.attempt_failed(record, exc, wait)
    step.host.emit(events.attempt(record, describe_error(exc), wait))
    return wait


def _retry_later(record: r.EffectRecord, exc: Exception, wait: float) -> Suspend:
    """Give the worker up until the next attempt is due: a durable timer."""
    wake_at = clock.now() + wait
    record.retry_at(error_data(exc, permanent=False), wake_at=wake_at, wait=wait)
    return Suspend(wake_at=wake_at, reason=retry_reason(record), records=[record], events=[])


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def retry_reason(record: r.EffectRecord) -> dict:
    """What a run waiting to retry a call shows: the tool, the next attempt and when,
    the last error. Also what the operator's retry now / give up find the call by."""
    error = record.error or {}
    return {"kind": "retry", "tool": record.tool, "attempt": record.attempts + 1,
            "error": str(error.get("message", ""))[:500], "error_type": error.get("type", ""),
            "wake_at": record.result["wake_at"], "step_no": record.step_no, "seq": record.seq}
