"""What a step's context talks to: the session that runs the step (RunSession,
runs/durable/session.py) or a replay of a history that writes nothing (VerifySession,
runs/durable/verify.py). Named once here, so that the two stay in step; the call path
(calls.py, attempts.py), parallel calls, child runs and streaming use nothing else of
either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .config import WorkerConfig
    from .events import Event
    from .observe import SessionObserver
    from .records import EffectRecord, RunRecord
    from .registry import AgentRegistry
    from .replay import ReplayState


class StepHost(Protocol):
    run: RunRecord             # the run as claimed: id, branch, owner, budget, usage
    replay: ReplayState        # what the log holds, shared by every context of the host
    store: Any                 # the Store (runs/durable/store.py): a step's reads, a launch
    registry: AgentRegistry    # the agents a spawn may launch
    config: WorkerConfig       # the gates, the price of metered calls, `launched`
    owner: str                 # the worker, written on every effect
    epoch: int                 # the claim's fencing epoch
    suspended_for: float       # seconds the run was away before this resume
    observed: SessionObserver  # the observability hooks (runs/durable/observe.py)

    @property
    def control(self) -> str | None:
        """The pause or cancel an operator asked for, as last read."""

    # --- boundaries ------------------------------------------------------------------
    def effect_boundary(self, *, settles: bool = False) -> None:
        """Before a new effect: honour shutdown, pause, cancel and fencing (Stop).
        `settles`: an idempotent call, which may be the one a dead worker left in flight."""

    def ensure_lease(self) -> None:
        """Right before the outside world is touched: the lease is still ours."""

    def settles_cancel(self) -> bool:
        """A cancel is pending and the step must first be settled (ReplayState.settling)."""

    # --- the journal ----------------------------------------------------------------
    def log_effect(self, record: EffectRecord, *, usage: dict | None = None) -> None:
        """Write an effect (intent or outcome) now, with everything buffered before it;
        `usage`: a metered call's, added to the run's ledger in the same commit."""

    def buffer_record(self, record: EffectRecord) -> None:
        """A record written with the next commit (now(), random(), a patch marker)."""

    def emit(self, event: Event) -> None:
        """An event, written with the next commit."""

    def set_progress(self, done: float, total: float, message: str) -> None:
        """The run's progress, written with the next commit."""

    def write_events(self, written: list[Event]) -> None:
        """Events written now (a streaming tool's batch)."""
