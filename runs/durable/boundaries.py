"""Where a session stops, and the lease it must hold to go on.

Before each step and before each new effect, the session looks at what another thread
or process may have changed: a shutdown of its worker, its lease lost to a newer
owner (fencing), an operator's pause or cancel (runs/durable/lease.py keeps them, as
the last write or renewal read them). Right before the outside world is touched, the
lease must still be its own for a while.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from . import clock
from . import records as r
from .errors import DurableError, FencedError, Stop, StoreFailure
from .faults import faults
from .lease import LeaseState
from .replay import ReplayState

if TYPE_CHECKING:  # pragma: no cover
    from .config import WorkerConfig

# A lease that ends within this many seconds is renewed before a tool is called.
LEASE_MARGIN = 0.5


class Boundaries:
    def __init__(self, store, run: r.RunRecord, config: WorkerConfig, lease: LeaseState,
                 replay: ReplayState, stop_event: threading.Event):
        self.store, self.run, self.config = store, run, config
        self.lease, self.replay, self.stop_event = lease, replay, stop_event

    @property
    def fenced(self) -> bool:
        return self.lease.fenced

    @property
    def control(self) -> str | None:
        return self.lease.control

    def settles_cancel(self) -> bool:
        """A cancel is pending and the step must first be settled (ReplayState.settling)."""
        return self.replay.settling and self.control == r.CANCEL

    def before_step(self, first: bool, slice_started: float) -> str | None:
        """Why the run stops before its next step, if it does: a shutdown, fencing, an
        operator's pause or cancel (not before the first step while settling), the slice
        used up. The slice is read at every boundary: a worker holding many runs shortens
        it when other runs start waiting for a slot (runs/worker/execute.py)."""
        if self.stop_event.is_set():
            return "shutdown"
        if self.fenced:
            return "fenced"
        if self.control in (r.PAUSE, r.CANCEL) and not (first and self.settles_cancel()):
            return self.control
        if not first and time.monotonic() >= slice_started + self.config.slice_seconds:
            return "slice"
        return None

    def before_effect(self, *, settles: bool = False) -> None:
        """Before a new effect: honour shutdown, pause and cancel, and fencing (Stop).

        `settles`: the effect is an idempotent call, which may be the one a dead
        worker left in flight (see ReplayState.settling)."""
        if self.fenced:
            raise Stop("fenced")
        if self.stop_event.is_set():
            raise Stop("shutdown")
        if self.replay.settled() and settles and self.control == r.CANCEL:
            return
        if self.control in (r.PAUSE, r.CANCEL):
            raise Stop(self.control)

    def ensure_lease(self) -> None:
        """Before touching the outside world, make sure the lease is still ours.

        A process that was frozen (SIGSTOP) past its lease finds out here, not
        after it has called the tool."""
        if clock.now() + LEASE_MARGIN >= self.lease.expires_at:
            try:
                self.renew()
            except DurableError:
                raise
            except Exception as exc:  # not a tool's failure: no tool call without a lease
                raise StoreFailure() from exc

    def renew(self) -> None:
        """Extend the lease (fenced by the epoch, like every write)."""
        faults.hit("lease_renewal", self.run.agent)
        expires = clock.now() + self.config.lease_seconds
        try:
            control = self.store.renew(self.run.id, self.lease.held.epoch, expires)
        except FencedError:
            self.lease.lost()
            raise
        self.lease.renewed(expires, control)
