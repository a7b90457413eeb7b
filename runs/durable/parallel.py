"""Parallel effects that replay deterministically: ctx.parallel and ctx.map.

Every call of a group takes its position (branch, step, seq) when the group is
asked for, in the order asked, before any of them runs; they then run in threads,
at most `max_concurrency` at once, and each logs its outcome at its own position
whenever it finishes. The results come back in the order asked. So a replay sees
the same calls at the same positions whatever order they finished in: after a
crash, the calls that finished replay their logged results, the unfinished
idempotent ones are made again under their keys, the unfinished non-idempotent
ones are in doubt (as for ctx.call).

Each call's digest covers its place in the group (index and size), so a replay
asking for a different set of calls (another item, another order, one more or one
fewer) is a NonDeterminismError at the group's first position that differs.

Outcomes: the group waits for every call it started. The engine's own stops win
over the calls' results, in this order: a crash or store failure, a fenced write,
a stop (pause, cancel, shutdown; calls not yet started are not started), an
in-doubt call or a non-determinism, a durable retry wait (the earliest). Then a
failed call raises its ToolFailedError (the first by position), unless
`return_exceptions=True` puts the errors in the result list in their places.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import records as r
from .calls import resolve
from .config import thread_ended
from .errors import DurableError, FencedError, Stop, Suspend, ToolFailedError
from .parallel_slots import NotStarted, Slot, running
from .policies.budget import waiters
from .registry import Tool

if TYPE_CHECKING:  # pragma: no cover
    from .step import Step

MAX_CONCURRENCY = 64
GROUP_KEY = "__parallel__"


@dataclass
class Call:
    """One call of a parallel group: `Call(tool, *args, **kwargs)`."""

    tool: Tool
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __init__(self, tool: Tool, *args, **kwargs):
        self.tool, self.args, self.kwargs = tool, args, kwargs


def as_call(spec) -> Call:
    if isinstance(spec, Call):
        return spec
    if isinstance(spec, tuple) and spec and isinstance(spec[0], Tool):
        return Call(spec[0], *spec[1:])
    raise TypeError(f"ctx.parallel needs Call(tool, ...) or (tool, *args) items, got {spec!r}")


def check_concurrency(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise ValueError(f"max_concurrency must be an integer from 1 to {MAX_CONCURRENCY}, "
                         f"not {value!r}")
    return value


def run_group(step: Step, specs, *, max_concurrency: int, return_exceptions: bool) -> list:
    calls = [as_call(spec) for spec in specs]
    limit = check_concurrency(max_concurrency)
    if not calls:
        return []
    group = _Group(step, calls, limit)
    group.run()
    _raise_engine_stop(group.failures)
    results = []
    for index in range(len(calls)):
        if index in group.failures:
            if not return_exceptions:
                raise group.failures[index]
            results.append(group.failures[index])
        else:
            results.append(group.outcomes[index])
    return results


class _Group:
    """One ctx.parallel: its calls' positions taken first, in the order asked (nothing
    has run yet), then the calls made, each in its place."""

    def __init__(self, step: Step, calls: list[Call], limit: int):
        self.step, self.limit = step, limit
        self.planned = []
        for index, call in enumerate(calls):
            digest_kwargs = {**call.kwargs, GROUP_KEY: [index, len(calls)]}
            position, recorded = step.next(r.CALL, call.tool.name, call.args, digest_kwargs)
            self.planned.append((call, position, recorded, digest_kwargs))
        self.outcomes: list[Any] = [None] * len(calls)
        self.failures: dict[int, BaseException] = {}
        self.abort = threading.Event()  # an engine stop: calls not started yet are not started
        self.slots = threading.BoundedSemaphore(limit)

    def run(self) -> None:
        fresh = []
        for index, (_call, _position, recorded, _kw) in enumerate(self.planned):
            if recorded is not None and recorded.replays:
                self.one(index)  # logged: no thread needed
            else:
                fresh.append(index)
        if fresh:
            # Twice the slots in threads: a call whose tool returned gives its slot to the
            # next call while its outcome is logged (parallel_slots.call_returned).
            with ThreadPoolExecutor(max_workers=min(2 * self.limit, len(fresh)),
                                    thread_name_prefix=f"parallel {self.step.run_id}") as pool:
                for index in fresh:
                    pool.submit(self.in_thread, index)

    def in_thread(self, index: int) -> None:
        try:
            self.one(index)
        finally:
            thread_ended(self.step.host.config)  # this thread will not be back

    def one(self, index: int) -> None:
        call, position, recorded, digest_kwargs = self.planned[index]
        slot = Slot(self.slots)
        try:
            slot.take()
            if self.abort.is_set():
                raise NotStarted()
            with running(slot, self.abort):
                self.outcomes[index] = resolve(self.step, call.tool, position, recorded,
                                               call.args, call.kwargs,
                                               digest_kwargs=digest_kwargs)
        except (ToolFailedError, NotStarted) as exc:
            self.failures[index] = exc
        except BaseException as exc:  # noqa: BLE001 - handed to the step's thread
            self.failures[index] = exc
            self.abort.set()
            waiters.wake()  # a sibling waiting for a budget's calls in flight gives up
        finally:
            slot.give_back()


def _raise_engine_stop(failures: dict[int, BaseException]) -> None:
    errors = [failures[i] for i in sorted(failures)]
    calls_own = (ToolFailedError, NotStarted)  # results of the calls, not engine stops
    ranked = (
        lambda e: not isinstance(e, Exception) and not isinstance(e, (Stop, Suspend)),
        lambda e: isinstance(e, FencedError),
        lambda e: isinstance(e, Stop),
        lambda e: isinstance(e, DurableError) and not isinstance(e, calls_own),
        lambda e: isinstance(e, Exception) and not isinstance(e, calls_own),
    )
    for matches in ranked:
        for error in errors:
            if matches(error):
                raise error
    waits = [e for e in errors if isinstance(e, Suspend)]
    if waits:
        first = min(waits, key=lambda s: s.wake_at if s.wake_at is not None else float("inf"))
        raise Suspend(wake_at=first.wake_at, reason=first.reason,
                      records=[rec for s in waits for rec in s.records],
                      events=[ev for s in waits for ev in s.events])
