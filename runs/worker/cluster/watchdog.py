"""The sentinel's watchdog: work waiting while every worker is idle.

Some faults kill nothing the guard loop can see: an idle worker stopped with
SIGSTOP while it holds the task queue's read lock, a pusher that is frozen, a
queue whose counter lost track of a task taken by a process killed a moment
later. What they have in common is seen from outside: tasks wait (in the local
task queue, or in the broker while the local queue is empty) and yet every
worker is idle. A healthy cluster never stays like that for long: a worker
takes a queued task within milliseconds, the pusher polls the broker every
`poll` seconds. When the state lasts longer than `patience` seconds the
sentinel replaces the generation (runs/worker/cluster/sentinel.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Watchdog:
    def __init__(self, patience: float, clock: Callable[[], float] = time.monotonic):
        self.patience = patience
        self.clock = clock
        self.since: float | None = None

    def reset(self) -> None:
        self.since = None

    def check(self, workers_idle: bool, queued_locally: int,
              broker_backlog: Callable[[], int]) -> str | None:
        """The reason to replace the generation, or None. `broker_backlog` is asked
        only when the local queue is empty and the workers idle (a database query)."""
        stuck = self._stuck(workers_idle, queued_locally, broker_backlog)
        if stuck is None:
            self.since = None
            return None
        now = self.clock()
        if self.since is None:
            self.since = now
        waited = now - self.since
        if waited < self.patience:
            return None
        self.since = None
        return f"{stuck} for {waited:.1f} s"

    @staticmethod
    def _stuck(workers_idle, queued_locally, broker_backlog) -> str | None:
        if not workers_idle:
            return None
        if queued_locally > 0:
            return f"{queued_locally} task(s) in the local queue and every worker idle"
        backlog = broker_backlog()
        if backlog > 0:
            return f"{backlog} task(s) in the broker, none pushed and every worker idle"
        return None
