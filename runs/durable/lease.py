"""What a session knows of its lease, shared with whatever renews it from another thread.

The session's own commits and renewals, a LeaseRenewer thread (runs/durable/executor.py)
and a worker's LeaseKeeper (runs/worker/leases.py) all report here, through these
methods and under one lock; nobody else writes a session's lease, fencing or pending
control request. The session reads them at its boundaries.
"""

from __future__ import annotations

import threading

from . import records as r


class LeaseState:
    def __init__(self, run_id: str, epoch: int, owner: str, expires_at: float,
                 control: str | None):
        self.held = r.LeaseHeld(run_id, epoch, owner)
        self._lock = threading.Lock()
        self._expires_at = expires_at
        self._control = control
        self._fenced = False

    @property
    def expires_at(self) -> float:
        return self._expires_at

    @property
    def control(self) -> str | None:
        """The pause or cancel an operator asked for, as the last write or renewal read it."""
        return self._control

    @property
    def fenced(self) -> bool:
        """Another owner took the run: no more effects."""
        return self._fenced

    def due_for_renewal(self, now: float, lease_seconds: float) -> bool:
        """Not fenced, and the lease ends within half a lease."""
        with self._lock:
            return not self._fenced and self._expires_at - now < lease_seconds / 2

    def renewed(self, expires_at: float, control: str | None) -> None:
        """A write or renewal extended the lease to `expires_at` and read `control`."""
        with self._lock:
            self._expires_at = max(self._expires_at, expires_at)
            self._control = control

    def read_control(self, control: str | None) -> None:
        """A write that released the lease, or did not move it, read `control`."""
        with self._lock:
            self._control = control

    def lost(self) -> None:
        """A write or renewal was refused: a newer owner holds the run."""
        with self._lock:
            self._fenced = True
