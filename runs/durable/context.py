"""RunContext: what an agent's step sees. Every call either replays or records.

The flow of `call`, read top to bottom: is there a logged result at this
position? Then check it is the same call and return (or re-raise) it. Else
write the intent if the tool is not idempotent, call it, and log the outcome.
What replay knows (the logged effects, a halt, settling) is the session's
ReplayState (runs/durable/replay.py), shared with every context of the session.
"""

from __future__ import annotations

import math
import random as _random
import time
from typing import TYPE_CHECKING, Any

from . import children, events, gates, metering, parallel, streaming
from . import records as r
from .errors import FencedError, InDoubtEffectError, ToolFailedError
from .faults import faults
from .registry import Tool
from .retry import LONGEST_WAIT, outcome_unknown, retry_after, retryable
from .serde import canonical, check_serializable, digest, preview

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
    """What one step sees. It shares the session's ReplayState (runs/durable/replay.py)
    and writes through the session's journal methods (log_effect, buffer_record, emit,
    set_progress) and boundaries (effect_boundary, ensure_lease); nothing else."""

    def __init__(self, session: RunSession, step_no: int, *, live: bool = False):
        self._session = session
        self._replay = session.replay
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
        return self._replay.replaying

    # --- effects ----------------------------------------------------------------
    def call(self, tool: Tool, *args, **kwargs) -> Any:
        """Replay the call logged at this position, or make it and log it.

        1. a logged outcome: the same result (or error) again, without calling;
        2. logged but unfinished (in doubt, waiting to retry, an operator's retry):
           decide whether it may be called again under its key;
        3. new: an effect boundary (pause, cancel, shutdown), the intent written
           ahead for a non-idempotent tool;
        then `_invoke`: call the tool under its retry policy and log the outcome.
        """
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call needs a @tool, got {tool!r}")
        position, recorded = self._next(r.CALL, tool.name, args, kwargs)
        return self._resolve(tool, position, recorded, args, kwargs)

    def _resolve(self, tool: Tool, position, recorded, args, kwargs, *,
                 digest_kwargs: dict | None = None) -> Any:
        """A call at its position: replayed, made again, or made. `digest_kwargs`: what
        a parallel call's digest covers besides its arguments (runs/durable/parallel.py)."""
        if recorded is None:
            record = self._begin(position, tool, args, kwargs, digest_kwargs=digest_kwargs)
        elif recorded.status == r.DONE:
            self._session.observed.replayed(recorded)
            return recorded.result
        elif recorded.status == r.RETRYING:
            return self._retry(tool, recorded, args, kwargs)
        elif recorded.status == r.ERROR and recorded.resolution != "retry":
            self._session.observed.replayed(recorded)
            raise _tool_error(recorded)
        else:
            record = self._again(position, tool, recorded, args, kwargs)
        if record.resolution == "skip" and record.status == r.DONE:  # a gate's skip, logged
            return record.result
        return self._invoke(tool, record, args, kwargs)

    def _begin(self, position, tool: Tool, args, kwargs, *,
               digest_kwargs: dict | None = None) -> r.EffectRecord:
        """A call that was never made: past the effect boundary, its intent logged first
        unless the tool is idempotent (its key makes a repeat harmless). The gates see the
        call's own arguments, never a parallel group's digest extras."""
        self._session.effect_boundary(settles=tool.idempotent)
        record = self._new_record(position, r.CALL, tool, args,
                                  kwargs if digest_kwargs is None else digest_kwargs)
        self._gate(tool, record, args, kwargs)
        if not tool.idempotent and record.status == r.INTENT:
            self._session.log_effect(record)  # write-ahead intent
        return record

    def _again(self, position, tool: Tool, recorded: r.EffectRecord, args, kwargs
               ) -> r.EffectRecord:
        """A logged call without an outcome (in doubt), or one an operator said to retry:
        an idempotent tool is called again under the same key; a non-idempotent one
        only on the operator's word."""
        if not tool.idempotent and recorded.resolution != "retry":
            if self._session.settles_cancel():  # nothing to settle by calling it
                raise Stop(r.CANCEL)
            error = InDoubtEffectError(position=position, tool=tool.name, key=recorded.key)
            error.record = recorded
            raise self._replay.halt(error)
        self._gate(tool, recorded, args, kwargs)  # called again: the gates decide again
        if recorded.status == r.DONE:  # skipped
            return recorded
        if not tool.idempotent:
            # The operator's retry is used up as it starts: if this attempt is cut
            # short too, it is in doubt again, never repeated without an operator.
            recorded.status, recorded.resolution, recorded.error = r.INTENT, "", None
            self._session.log_effect(recorded)
        return recorded

    def _gate(self, tool: Tool, record: r.EffectRecord, args, kwargs) -> None:
        """Before anything of a call reaches the log or the world: the session's gates
        may let it through, hold the run (Held) or refuse it (runs/durable/gates.py).
        on_resume's calls are never replayed, so they cannot be held: not gated."""
        if not self._live:
            gates.check_call(self._session, tool, record, args, kwargs)

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
        if not self._live:  # a shared limit counts this attempt too (before its intent)
            gates.check_attempt(self._session, tool, record, args, kwargs)
        if not tool.idempotent:
            # This attempt may reach the target: until its outcome is logged, it is in doubt.
            record.status, record.error = r.INTENT, None
            self._session.log_effect(record)
        return self._invoke(tool, record, args, kwargs, first_at=waiting["first_at"])

    def _invoke(self, tool: Tool, record: r.EffectRecord, args, kwargs, *,
                first_at: float | None = None):
        """Call the tool (its attempts under its policy) and log the outcome."""
        with self._session.observed.effect(record):  # a span, the latency, the log context
            try:
                self._before_invoke(tool, record, first_at=first_at)
                try:
                    result, error = self._attempts(tool, record, args, kwargs)
                finally:
                    parallel.call_returned()
                return self._after_invoke(tool, record, result, error, call=(args, kwargs))
            finally:  # a slot of a shared limit is given back however the call ended
                gates.call_ended(self._session, tool, record)

    def _before_invoke(self, tool: Tool, record: r.EffectRecord, *,
                       first_at: float | None) -> None:
        """The last instant before the outside world is touched: the intent (if any) is
        logged and the lease is ours. A check that may refuse or hold the call goes
        here, after the lease check and before the fault point."""
        self._replay.settled()
        self._session.ensure_lease()
        faults.hit("before_effect", self._tag(tool))
        if first_at is None:  # a first attempt (not the next one after a durable wait)
            record.started_at, record.attempts = time.time(), 0

    def _attempts(self, tool: Tool, record: r.EffectRecord, args, kwargs):
        """(result, None) or (None, the last error): attempts until one succeeds or the
        policy gives up. A wait too long to block on leaves as a durable timer."""
        call_kwargs = dict(kwargs, idempotency_key=record.key) if tool.idempotent else kwargs
        while True:
            record.attempts += 1
            try:
                result = tool.fn(*args, **call_kwargs)
                if tool.stream:  # chunks to the viewers as they come, the result logged
                    result = streaming.drain(self._session, record, result)
                check_serializable(result, f"result of {tool.name}")
                return result, None
            except FencedError:  # a streamed batch was refused: not the tool's failure
                raise
            except Exception as exc:  # a tool's failure is data: logged, replayed
                wait = self._next_wait(tool, record, exc)
                if wait is None:
                    return None, exc
                if wait > INLINE_SLEEP_SECONDS:
                    faults.hit("before_retry_wait", self._tag(tool))
                    raise self._retry_later(record, exc, wait) from exc
                gates.call_ended(self._session, tool, record)  # this attempt's request is over
                time.sleep(wait)
                self._session.ensure_lease()
                self._gate_next_attempt(tool, record, args, kwargs, exc)

    def _gate_next_attempt(self, tool: Tool, record: r.EffectRecord, args, kwargs,
                           exc: Exception) -> None:
        """An attempt after a short wait is one more request to the world, as one after a
        durable wait is: the gates that count every attempt (a shared limit) are asked
        again. Held, the call becomes a durable retry due at once, so that once the hold
        is over the replay asks them again before the attempt (`_retry`)."""
        if self._live:
            return
        try:
            gates.check_attempt(self._session, tool, record, args, kwargs)
        except gates.Held:
            _mark_retrying(record, exc, wake_at=time.time())
            self._session.log_effect(record)
            raise

    def _after_invoke(self, tool: Tool, record: r.EffectRecord, result, error, *,
                      call: tuple = ((), {})):
        """The tool returned (or failed for good): log the outcome, hand it to the step.
        A hook that sees every outcome goes here, before the log."""
        if error is not None and outcome_unknown(error, idempotent=tool.idempotent) \
                and not self._live:
            raise self._in_doubt(record, error) from error
        record.finished_at = time.time()
        record.resolution = ""
        usage = None
        if error is None:
            result = canonical(result)  # what a replay of it will return
            record.status, record.result = r.DONE, result
            usage = self._meter(tool, record, result, *call)
        else:
            record.status, record.result = r.ERROR, None
            record.error = error_data(error, permanent=not retryable(error, idempotent=True))
        faults.hit("after_effect_before_log", self._tag(tool))
        self._session.log_effect(record, usage=usage)
        if error is not None:
            raise _tool_error(record) from error
        return result

    def _meter(self, tool: Tool, record: r.EffectRecord, result, args, kwargs) -> dict | None:
        """A metered call's usage, on its record; the session adds it to the run's totals
        in the commit of its outcome, so that a replay (which returns the logged result)
        never counts it again (runs/durable/metering.py)."""
        if tool.meter is None:
            return None
        record.usage = metering.measure(tool, result, gates.named_arguments(tool, args, kwargs),
                                        self._session.config.price)
        return record.usage

    def _in_doubt(self, record: r.EffectRecord, exc: Exception) -> InDoubtEffectError:
        """Halt the run on a call that may have happened: its intent stays without an
        outcome (with the error, for the operator), as if the worker had died in it."""
        record.status, record.resolution = r.INTENT, ""
        record.error = error_data(exc, permanent=False)
        self._session.log_effect(record)
        error = InDoubtEffectError(position=record.position, tool=record.tool, key=record.key,
                                   error=describe_error(exc))
        error.record = record
        return self._replay.halt(error)

    def _next_wait(self, tool: Tool, record: r.EffectRecord, exc: Exception) -> float | None:
        """Seconds until the next attempt, or None: the error is final. Each failed
        attempt is an event."""
        gates.attempt_failed(self._session, tool, record, exc)
        wait = None
        if retryable(exc, idempotent=tool.idempotent):
            wait = tool.retry.next_wait(record.attempts, first_at=record.started_at,
                                        now=time.time(), key=record.key,
                                        retry_after=retry_after(exc))
        if wait is not None and wait > INLINE_SLEEP_SECONDS and self._live:
            wait = None  # on_resume's calls are never replayed, so they cannot wait durably
        self._session.observed.attempt_failed(record, exc, wait)
        self._session.emit(events.attempt(record, describe_error(exc), wait))
        return wait

    def _retry_later(self, record: r.EffectRecord, exc: Exception, wait: float) -> Suspend:
        """Give the worker up until the next attempt is due: a durable timer."""
        wake_at = time.time() + wait
        _mark_retrying(record, exc, wake_at=wake_at, wait=wait)
        return Suspend(wake_at=wake_at, reason=retry_reason(record), records=[record],
                       events=[])

    def parallel(self, calls, *, max_concurrency: int = 8,
                 return_exceptions: bool = False) -> list:
        """Make `calls` (each `Call(tool, *args, **kwargs)` or `(tool, *args)`) at once, at
        most `max_concurrency` at a time; their results in the order asked, on every
        replay (docs/parallel.md). A failed call raises its ToolFailedError once all
        are done, or is returned in its place with `return_exceptions=True`."""
        return parallel.run_group(self, calls, max_concurrency=max_concurrency,
                                  return_exceptions=return_exceptions)

    def map(self, tool: Tool, items, *, max_concurrency: int = 8,
            return_exceptions: bool = False) -> list:
        """`tool(item)` for every item, at once: ctx.parallel of one tool."""
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.map needs a @tool, got {tool!r}")
        return self.parallel([parallel.Call(tool, item) for item in items],
                             max_concurrency=max_concurrency,
                             return_exceptions=return_exceptions)

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
                      events=[events.input_requested(prompt, schema, step=position[1],
                                                     seq=position[2])])

    # --- child runs (docs/children.md) ----------------------------------------------
    def spawn(self, agent: str, inputs: dict | None = None, *,
              max_children: int = children.DEFAULT_MAX_CHILDREN) -> children.Child:
        """Launch a child run of `agent` (its own run, page and audit, owned by this
        run's owner) and return its handle at once. Logged: a replay returns the same
        child, never a second one. With `max_children` children of this run not yet
        ended, the run waits (without a worker) for one to end first."""
        return children.spawn(self, agent, inputs, max_children=max_children)

    def wait(self, child) -> Any:
        """The output of a child run, once it ends; the run gives its worker up until
        then. A failed or cancelled child raises ChildFailedError."""
        return self.wait_all([child])[0]

    def wait_all(self, handles, *, return_exceptions: bool = False) -> list:
        """The outputs of child runs in the order given, once all have ended (the run
        waits without a worker). A failed or cancelled child raises ChildFailedError,
        or stands in its place with `return_exceptions=True`."""
        return children.wait_all(self, handles, return_exceptions=return_exceptions)

    # --- viewer-facing ------------------------------------------------------------
    # A replay of a logged position already wrote what the step emitted before it, with
    # that position's commit: writing it again would duplicate it for viewers.
    # (on_resume's context is `live`: never replayed, so always written.)
    def log(self, message: str) -> None:
        if self._live or not self._replay.replaying:
            self._session.emit(events.log(self.step_no, _text(message, 4000)))

    def progress(self, done: float, total: float, message: str = "") -> None:
        if self._live or not self._replay.replaying:
            self._session.set_progress(done, total, _text(message, 500))

    # --- internals ----------------------------------------------------------------
    def _next(self, kind: str, name: str, args, kwargs):
        self._replay.raise_if_halted()  # the agent caught it and went on: stop again
        seq = self._seq
        self._seq += 1
        position = (self.branch, self.step_no, seq)
        if self._live:
            return position, None
        return position, self._replay.take(position, kind, name, args, kwargs)

    def _tag(self, tool: Tool) -> str:
        return f"{self._session.run.agent}/{tool.name}"

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


def _mark_retrying(record: r.EffectRecord, exc: Exception, *, wake_at: float,
                   wait: float = 0.0) -> None:
    """The call's next attempt is due at `wake_at`: what the log says of a call between
    two attempts (`_retry` makes the next one)."""
    record.status, record.finished_at = r.RETRYING, None
    record.error = error_data(exc, permanent=False)
    record.result = {"wake_at": wake_at, "first_at": record.started_at, "wait": wait}


def _tool_error(record: r.EffectRecord) -> ToolFailedError:
    if record.resolution == gates.REFUSED:  # a gate refused it: the same error again
        return gates.refusal(record)
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
