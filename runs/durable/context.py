"""RunContext: what an agent's step sees. Every call either replays or records.

The flow of `call`, read top to bottom: is there a logged result at this
position? Then check it is the same call and return (or re-raise) it. Else
write the intent if the tool is not idempotent, call it, and log the outcome.
"""

from __future__ import annotations

import math
import random as _random
import time
from typing import TYPE_CHECKING, Any

from . import records as r
from .errors import InDoubtEffectError, NonDeterminismError, ToolFailedError
from .faults import faults
from .registry import Tool
from .retry import LONGEST_WAIT, outcome_unknown, retry_after, retryable
from .serde import check_serializable, digest, preview

if TYPE_CHECKING:  # pragma: no cover
    from .session import RunSession

# A sleep shorter than this blocks the worker instead of releasing it: the
# round trip through the sweep would cost more than the sleep itself.
INLINE_SLEEP_SECONDS = 1.0
MAX_SLEEP_SECONDS = LONGEST_WAIT


class Suspend(BaseException):
    """The run gives up its worker until a timer fires or a user answers.

    A BaseException so that an agent's `except Exception` cannot swallow it.
    """

    def __init__(self, *, wake_at: float | None, reason: dict, records: list, events: list):
        self.wake_at = wake_at
        self.reason = reason
        self.records = records
        self.events = events


class Stop(BaseException):
    """Leave the run at an effect boundary: pause, cancel, shutdown or fenced."""

    def __init__(self, why: str):
        self.why = why


class StoreFailure(BaseException):
    """The store failed (connection lost, database restarted) in the middle of a run.

    Whether the write landed is unknown, so the session writes nothing more and
    ends (ABANDONED). Its worker may wait for the store and take the run back at
    once (execute_run's `reconnect`); else the run is left as a crash leaves it:
    its lease runs out and the sweep hands it out again. Either way it resumes
    from what the store really holds. A BaseException
    so that neither the agent's `except Exception` nor the session's handling of
    the agent's own failures (which fails the run) can take it for a bug in the
    agent.
    """


def idempotency_key(run_id: str, branch: int, step_no: int, seq: int) -> str:
    return f"{run_id}:{branch}:{step_no}:{seq}"


class RunContext:
    def __init__(self, session: RunSession, step_no: int, *, live: bool = False):
        self._session = session
        self.step_no = step_no
        self._seq = 0
        # on_resume's context: calls are fresh every time, never replayed
        self._live = live

    # --- identity -----------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._session.run.id

    @property
    def branch(self) -> int:
        return self._session.run.branch

    @property
    def suspended_for(self) -> float:
        """Seconds the run was away (crash, deploy, pause, wait) before this resume."""
        return self._session.suspended_for

    @property
    def inputs(self) -> dict:
        return self._session.run.inputs

    @property
    def is_replaying(self) -> bool:
        return self._session.replay_pending() > 0

    # --- effects ----------------------------------------------------------------
    def call(self, tool: Tool, *args, **kwargs) -> Any:
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call needs a @tool, got {tool!r}")
        position, recorded = self._next(r.CALL, tool.name, args, kwargs)
        if recorded is not None:
            if recorded.status == r.DONE:
                return recorded.result
            if recorded.status == r.RETRYING:
                return self._retry(tool, recorded, args, kwargs)
            if recorded.status == r.ERROR and recorded.resolution != "retry":
                raise _tool_error(recorded)
            if not tool.idempotent and recorded.resolution != "retry":
                if self._session.settling:  # cancelled: nothing to settle by calling it
                    raise Stop(r.CANCEL)
                error = InDoubtEffectError(position=position, tool=tool.name, key=recorded.key)
                error.record = recorded
                raise self._session.halt(error)
            record = recorded  # in doubt (idempotent) or an operator said retry: same key
            if not tool.idempotent:
                # The operator's retry is used up as it starts: if this attempt is cut
                # short too, it is in doubt again, never repeated without an operator.
                record.status, record.resolution, record.error = r.INTENT, "", None
                self._session.log_effect(record)
        else:
            self._session.effect_boundary(settles=tool.idempotent)
            record = self._new_record(position, r.CALL, tool, args, kwargs)
            if not tool.idempotent:
                self._session.log_effect(record)  # write-ahead intent
        return self._invoke(tool, record, args, kwargs)

    def _retry(self, tool: Tool, record: r.EffectRecord, args, kwargs):
        """The next attempt of a call waiting out its retry policy on a durable timer.

        Woken early (a resume after a pause, a crash of another run's worker), it
        waits again until the recorded wake time: the same wait as the first time."""
        waiting = dict(record.result)
        remaining = waiting["wake_at"] - time.time()
        if remaining > INLINE_SLEEP_SECONDS:
            raise Suspend(wake_at=waiting["wake_at"], reason=retry_reason(record),
                          records=[], events=[])
        self._session.effect_boundary(settles=tool.idempotent)
        if remaining > 0:
            time.sleep(remaining)
        if not tool.idempotent:
            # This attempt may reach the target: until its outcome is logged, it is in doubt.
            record.status, record.error = r.INTENT, None
            self._session.log_effect(record)
        return self._invoke(tool, record, args, kwargs, first_at=waiting["first_at"])

    def _invoke(self, tool: Tool, record: r.EffectRecord, args, kwargs, *,
                first_at: float | None = None):
        session = self._session
        session.settling = False
        session.ensure_lease()
        tag = f"{session.run.agent}/{tool.name}"
        faults.hit("before_effect", tag)
        if first_at is None:  # a first attempt (not the next one after a durable wait)
            record.started_at, record.attempts = time.time(), 0
        call_kwargs = dict(kwargs, idempotency_key=record.key) if tool.idempotent else kwargs
        while True:
            record.attempts += 1
            try:
                result = tool.fn(*args, **call_kwargs)
                check_serializable(result, f"result of {tool.name}")
                error = None
                break
            except Exception as exc:  # a tool's failure is data: logged, replayed
                error = exc
                wait = self._next_wait(tool, record, exc)
                if wait is None:
                    break
                if wait > INLINE_SLEEP_SECONDS:
                    faults.hit("before_retry_wait", tag)
                    raise self._retry_later(record, exc, wait) from exc
                time.sleep(wait)
                session.ensure_lease()
        if error is not None and outcome_unknown(error, idempotent=tool.idempotent) \
                and not self._live:
            raise self._in_doubt(record, error) from error
        record.finished_at = time.time()
        record.resolution = ""
        if error is None:
            record.status, record.result = r.DONE, result
        else:
            record.status, record.result = r.ERROR, None
            record.error = error_data(error, permanent=not retryable(error, idempotent=True))
        faults.hit("after_effect_before_log", tag)
        session.log_effect(record)
        if error is not None:
            raise _tool_error(record) from error
        return result

    def _in_doubt(self, record: r.EffectRecord, exc: Exception) -> InDoubtEffectError:
        """Halt the run on a call that may have happened: its intent stays without an
        outcome (with the error, for the operator), as if the worker had died in it."""
        record.status, record.resolution = r.INTENT, ""
        record.error = error_data(exc, permanent=False)
        self._session.log_effect(record)
        error = InDoubtEffectError(position=record.position, tool=record.tool, key=record.key,
                                   error=describe_error(exc))
        error.record = record
        return self._session.halt(error)

    def _next_wait(self, tool: Tool, record: r.EffectRecord, exc: Exception) -> float | None:
        """Seconds until the next attempt, or None: the error is final. Each failed
        attempt is an event."""
        wait = None
        if retryable(exc, idempotent=tool.idempotent):
            wait = tool.retry.next_wait(record.attempts, first_at=record.started_at,
                                        now=time.time(), key=record.key,
                                        retry_after=retry_after(exc))
        if wait is not None and wait > INLINE_SLEEP_SECONDS and self._live:
            wait = None  # on_resume's calls are never replayed, so they cannot wait durably
        self._session.emit("attempt", {
            "step": record.step_no, "seq": record.seq, "tool": record.tool,
            "attempt": record.attempts, "error": describe_error(exc),
            "retry_in": None if wait is None else round(wait, 3)}, live=True)
        return wait

    def _retry_later(self, record: r.EffectRecord, exc: Exception, wait: float) -> Suspend:
        """Give the worker up until the next attempt is due: a durable timer."""
        wake_at = time.time() + wait
        record.status, record.finished_at = r.RETRYING, None
        record.error = error_data(exc, permanent=False)
        record.result = {"wake_at": wake_at, "first_at": record.started_at, "wait": wait}
        return Suspend(wake_at=wake_at, reason=retry_reason(record), records=[record],
                       events=[])

    def now(self) -> float:
        """The current time (POSIX seconds), the same on every replay."""
        return self._recorded_value(r.NOW, time.time)

    def random(self) -> float:
        """A random float in [0, 1), the same on every replay."""
        return self._recorded_value(r.RANDOM, _random.random)

    def _recorded_value(self, kind: str, produce):
        position, recorded = self._next(kind, kind, (), {})
        if recorded is not None:
            return recorded.result
        record = self._new_record(position, kind, None, (), {})
        record.status, record.result = r.DONE, produce()
        record.started_at = record.finished_at = time.time()
        self._session.buffer_record(record)
        return record.result

    def sleep(self, seconds: float) -> None:
        """A durable timer: long sleeps free the worker, and the run wakes later."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
                not math.isfinite(seconds) or seconds > MAX_SLEEP_SECONDS:
            raise ValueError(f"ctx.sleep needs a number of seconds up to {MAX_SLEEP_SECONDS:.0f} "
                             f"(a century), not {seconds!r}")
        position, recorded = self._next(r.SLEEP, "sleep", (seconds,), {})
        new = []
        if recorded is None:
            self._session.effect_boundary()
            record = self._new_record(position, r.SLEEP, None, (seconds,), {})
            record.started_at = time.time()
            record.status, record.result = r.DONE, {"wake_at": record.started_at + seconds}
            new.append(record)
            recorded = record
        wake_at = recorded.result["wake_at"]
        remaining = wake_at - time.time()
        if remaining <= 0:
            for record in new:
                self._session.buffer_record(record)
            return
        if remaining <= INLINE_SLEEP_SECONDS:
            for record in new:
                self._session.log_effect(record)
            time.sleep(remaining)
            return
        raise Suspend(wake_at=wake_at, reason={"kind": "sleep", "seconds": seconds,
                                               "wake_at": wake_at},
                      records=new, events=[])

    def wait_for_input(self, prompt: str, schema: dict | None = None) -> Any:
        """Wait, visible in the UI, until a user answers; returns the answer."""
        position, recorded = self._next(r.INPUT, "input", (prompt,), {"schema": schema})
        if recorded is not None and recorded.status == r.DONE:
            return recorded.result
        reason = {"kind": "input", "prompt": prompt, "schema": schema, "seq": position[2],
                  "step_no": position[1]}
        if recorded is not None:
            raise Suspend(wake_at=None, reason=reason, records=[], events=[])
        self._session.effect_boundary()
        record = self._new_record(position, r.INPUT, None, (prompt,), {"schema": schema})
        record.args = {"prompt": prompt, "schema": schema}
        record.started_at = time.time()
        raise Suspend(wake_at=None, reason=reason, records=[record],
                      events=[("input_requested", {"prompt": prompt, "schema": schema,
                                                   "seq": position[2], "step": position[1]})])

    # --- viewer-facing ------------------------------------------------------------
    def log(self, message: str) -> None:
        self._session.emit("log", {"step": self.step_no, "message": _text(message, 4000)},
                           live=self._live)

    def progress(self, done: float, total: float, message: str = "") -> None:
        self._session.set_progress(done, total, _text(message, 500), live=self._live)

    # --- internals ----------------------------------------------------------------
    def _next(self, kind: str, name: str, args, kwargs):
        if self._session.halted is not None:  # the agent caught it and went on: stop again
            raise self._session.halted
        seq = self._seq
        self._seq += 1
        position = (self.branch, self.step_no, seq)
        if self._live:
            return position, None
        recorded = self._session.replay_take(position)
        if recorded is not None:
            attempted = {"kind": kind, "tool": name, "args_preview": preview(args, kwargs),
                         "digest": digest(name, args, kwargs)}
            if (recorded.kind, recorded.tool, recorded.digest) != (kind, name, attempted["digest"]):
                raise self._session.halt(NonDeterminismError(
                    position=position, recorded=recorded.describe(), attempted=attempted))
        return position, recorded

    def _new_record(self, position, kind, tool: Tool | None, args, kwargs) -> r.EffectRecord:
        branch, step_no, seq = position
        name = tool.name if tool is not None else kind
        if kind in (r.SLEEP, r.INPUT):
            name = "sleep" if kind == r.SLEEP else "input"
        return r.EffectRecord(
            branch=branch, step_no=step_no, seq=seq, kind=kind, tool=name,
            digest=digest(name, args, kwargs),
            key=idempotency_key(self.run_id, branch, step_no, seq),
            idempotent=bool(tool and tool.idempotent), status=r.INTENT,
            args_preview=preview(args, kwargs), worker=self._session.owner,
        )


def _tool_error(record: r.EffectRecord) -> ToolFailedError:
    error = record.error or {}
    return ToolFailedError(record.tool, error.get("type", "Error"), error.get("message", ""),
                           record.attempts, permanent=bool(error.get("permanent")))


def error_data(exc: BaseException, *, permanent: bool) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "permanent": permanent}


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def retry_reason(record: r.EffectRecord) -> dict:
    """What a run waiting to retry a call shows: the tool, the next attempt and when,
    the last error. Also what the operator's retry now / give up find the call by."""
    error = record.error or {}
    return {"kind": "retry", "tool": record.tool, "attempt": record.attempts + 1,
            "error": str(error.get("message", ""))[:500], "error_type": error.get("type", ""),
            "wake_at": record.result["wake_at"], "step_no": record.step_no, "seq": record.seq}


def _text(message, limit: int) -> str:
    # Log lines are for people: a NUL (which a jsonb event row cannot hold)
    # becomes the replacement character rather than failing the step.
    return str(message)[:limit].replace("\x00", "\ufffd")
