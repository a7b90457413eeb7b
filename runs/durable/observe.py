"""What the engine tells whoever watches it: metrics, traces and log context.

The engine knows nothing of Prometheus or OpenTelemetry. It calls the hooks below
at the moments an operator wants to see (a claim, a step, an effect, a wait, an
ending); the default observer does nothing, so the engine runs the same without
one. The worker side installs its own (`runs/observability/observer.py`) with
`install(observer)`.

Two levels, so that per-run state (a span, a log context) needs no lookup:
`Observer` answers once per claim with a `SessionObserver`, whose methods the
session and its contexts call. Hooks run on the run's own thread and must not
raise: a run never fails because it could not be observed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager as ContextManager
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .records import CheckpointRecord, EffectRecord, RunRecord

_NULL = nullcontext()


class SessionObserver:
    """One claim of one run. No-op: every method returns at once."""

    def claimed(self, seconds: float) -> None:
        """The claim (and on PostgreSQL the resume's reads) took `seconds`."""

    def step(self, step_no: int, replaying: bool) -> ContextManager[Any]:
        """Around one step of the agent; `replaying`: logged effects remain to replay."""
        return _NULL

    def effect(self, record: EffectRecord) -> ContextManager[Any]:
        """Around a tool call that really happens (every attempt within it). On exit
        `record` holds the outcome: status done, error, retrying, or intent (in doubt)."""
        return _NULL

    def replayed(self, record: EffectRecord) -> None:
        """A call answered from the log, without calling the tool."""

    def attempt_failed(self, record: EffectRecord, error: BaseException,
                       retry_in: float | None) -> None:
        """An attempt failed; `retry_in` seconds until the next one, None: it was the last."""

    def checkpoint(self, checkpoint: CheckpointRecord) -> None:
        """A checkpoint was committed."""

    def waiting(self, kind: str) -> None:
        """The run gave its worker up on a durable wait (retry, sleep, input)."""

    def attention(self, kind: str) -> None:
        """The run stopped for an operator (in_doubt, non_determinism, crash_loop...)."""

    def ended(self, outcome: str) -> None:
        """The claim is over, with an Outcome."""


NOOP_SESSION = SessionObserver()


class Claimed(Protocol):
    """What an observer reads of a claim (a RunSession, runs/durable/session.py)."""

    run: RunRecord
    epoch: int
    crashed: bool  # it took over a dead worker's lease
    owner: str


class Observer:
    """The installed observer. No-op by default."""

    def session(self, session: Claimed) -> SessionObserver:
        """A claim succeeded; `session.crashed`: it took over a dead worker's lease."""
        return NOOP_SESSION

    def launched(self, run: RunRecord) -> None:
        """A run was written (the caller's trace context, if any, is current)."""

    def acted(self, action: str, run: RunRecord) -> None:
        """An operator action committed (pause, cancel, resolve...)."""


_installed: list[Observer] = [Observer()]


def install(observer: Observer) -> None:
    _installed[0] = observer


def current() -> Observer:
    return _installed[0]
