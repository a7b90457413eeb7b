"""RunContext: what an agent's step sees. Every effect either replays or records.

Each method takes the step's next position and asks the log what is there: a logged
effect answers again (a call's result or error, a child, a value, a timer), a new one
is made and logged. The call path is runs/durable/calls.py (read it as DBOS's
invoke_step: replay, or record); parallel calls, child runs and the positions the
effects take are parallel.py, children.py and step.py, all on the context's one
internal side (`Step`). What replay knows is the host's ReplayState
(runs/durable/replay.py), shared by every context of the session.
"""

from __future__ import annotations

import math
import random as _random
import time
from typing import TYPE_CHECKING, Any

from . import calls, children, clock, events, parallel
from . import records as r
from .errors import Suspend
from .registry import Tool
from .retry import LONGEST_WAIT, frees_the_worker
from .step import Step

if TYPE_CHECKING:  # pragma: no cover
    from .host import StepHost

MAX_SLEEP_SECONDS = LONGEST_WAIT


class RunContext:
    """What one step sees. It reads and writes through its host (runs/durable/host.py:
    the session running the step, or a replay that writes nothing); nothing else."""

    def __init__(self, host: StepHost, step_no: int, *, live: bool = False):
        self._host = host
        self._step = Step(host, step_no, live=live)  # on_resume's: live, never replayed
        self.step_no = step_no

    # --- identity -----------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._host.run.id

    @property
    def branch(self) -> int:
        return self._host.run.branch

    @property
    def suspended_for(self) -> float:
        """Seconds the run was away (crash, deploy, pause, wait) before this resume."""
        return self._host.suspended_for

    @property
    def inputs(self) -> dict:
        return self._host.run.inputs

    @property
    def is_replaying(self) -> bool:
        return self._host.replay.replaying

    # --- effects ----------------------------------------------------------------
    def call(self, tool: Tool, *args, **kwargs) -> Any:
        """Replay the call logged at this position, or make it and log it
        (runs/durable/calls.py)."""
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call needs a @tool, got {tool!r}")
        return calls.call(self._step, tool, args, kwargs)

    def parallel(self, calls, *, max_concurrency: int = 8,
                 return_exceptions: bool = False) -> list:
        """Make `calls` (each `Call(tool, *args, **kwargs)` or `(tool, *args)`) at once, at
        most `max_concurrency` at a time; their results in the order asked, on every
        replay (docs/parallel.md). A failed call raises its ToolFailedError once all
        are done, or is returned in its place with `return_exceptions=True`."""
        return parallel.run_group(self._step, calls, max_concurrency=max_concurrency,
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
        position, recorded = self._step.next(kind, kind, (), {})
        if recorded is not None:
            return recorded.result
        record = self._step.new_record(position, kind, None, (), {})
        record.done(produce(), at=clock.now())
        self._host.buffer_record(record)
        return record.result

    def patched(self, patch_id: str) -> bool:
        """Whether this point of the step runs the patched code (docs/deploys.md): False
        while replaying a history that was recorded by code without the patch, True
        from then on (the answer is recorded, so every replay gives it again). New code
        takes old runs over deterministically: `if ctx.patched("x"): new else: old`."""
        if not isinstance(patch_id, str) or not patch_id:
            raise ValueError(f"ctx.patched needs a patch id (a non-empty string), not {patch_id!r}")
        position = self._step.here()
        if self._step.live:
            return True  # on_resume's calls are never replayed: always the new code
        found = self._host.replay.patch_marker(position, patch_id)
        if found is False:
            return False
        self._step.advance()
        if found is None:
            record = self._step.new_record(position, r.PATCH, None, (patch_id,), {})
            record.tool = patch_id
            record.done(True, at=clock.now())
            self._host.buffer_record(record)
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """The patch `patch_id` is the only code now: histories recorded with its marker
        still replay (the marker is passed over), and no marker is recorded any more.
        Once no run in flight holds the marker, the call can go (replay-check says)."""
        if not self._step.live and self._host.replay.patch_marker(self._step.here(), patch_id):
            self._step.advance()

    def sleep(self, seconds: float) -> None:
        """A durable timer: long sleeps free the worker, and the run wakes later."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
                not math.isfinite(seconds) or seconds > MAX_SLEEP_SECONDS:
            raise ValueError(f"ctx.sleep needs a number of seconds up to {MAX_SLEEP_SECONDS:.0f} "
                             f"(a century), not {seconds!r}")
        position, recorded = self._step.next(r.SLEEP, "sleep", (seconds,), {})
        new = []
        if recorded is None:
            self._host.effect_boundary()
            recorded = self._step.new_record(position, r.SLEEP, None, (seconds,), {})
            now = clock.now()
            recorded.done({"wake_at": now + seconds}, at=now, finished=False)
            new.append(recorded)
        wake_at = recorded.result["wake_at"]
        remaining = wake_at - clock.now()
        if remaining <= 0:
            for record in new:
                self._host.buffer_record(record)
        elif not frees_the_worker(remaining):
            for record in new:
                self._host.log_effect(record)
            time.sleep(remaining)
        else:
            raise Suspend(wake_at=wake_at, reason={"kind": "sleep", "seconds": seconds,
                                                   "wake_at": wake_at},
                          records=new, events=[])

    def wait_for_input(self, prompt: str, schema: dict | None = None) -> Any:
        """Wait, visible in the UI, until a user answers; returns the answer."""
        position, recorded = self._step.next(r.INPUT, "input", (prompt,), {"schema": schema})
        if recorded is not None and recorded.status == r.DONE:
            return recorded.result
        reason = {"kind": "input", "prompt": prompt, "schema": schema, "seq": position[2],
                  "step_no": position[1]}
        if recorded is not None:
            raise Suspend(wake_at=None, reason=reason, records=[], events=[])
        self._host.effect_boundary()
        record = self._step.new_record(position, r.INPUT, None, (prompt,), {"schema": schema})
        record.args = {"prompt": prompt, "schema": schema}
        record.started_at = clock.now()
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
        return children.spawn(self._step, agent, inputs, max_children=max_children)

    def wait(self, child) -> Any:
        """The output of a child run, once it ends; the run gives its worker up until
        then. A failed or cancelled child raises ChildFailedError."""
        return self.wait_all([child])[0]

    def wait_all(self, handles, *, return_exceptions: bool = False) -> list:
        """The outputs of child runs in the order given, once all have ended (the run
        waits without a worker). A failed or cancelled child raises ChildFailedError,
        or stands in its place with `return_exceptions=True`."""
        return children.wait_all(self._step, handles, return_exceptions=return_exceptions)

    # --- viewer-facing ------------------------------------------------------------
    # A replay of a logged position already wrote what the step emitted before it, with
    # that position's commit: writing it again would duplicate it for viewers.
    # (on_resume's context is `live`: never replayed, so always written.)
    def log(self, message: str) -> None:
        if self._step.live or not self._host.replay.replaying:
            self._host.emit(events.log(self.step_no, _text(message, 4000)))

    def progress(self, done: float, total: float, message: str = "") -> None:
        if self._step.live or not self._host.replay.replaying:
            self._host.set_progress(done, total, _text(message, 500))


def _text(message, limit: int) -> str:
    # Log lines are for people: a NUL (which a jsonb event row cannot hold)
    # becomes the replacement character rather than failing the step.
    return str(message)[:limit].replace("\x00", "\ufffd")
