"""The engine's wall clock: every time it writes (leases, timers, when an effect ran) and
every time it compares with a stored one.

By default the host's own clock, time.time() (read at each call, so that a test may move
it). A worker tree installs the database's clock (`use`, runs/worker/tree.py with
runs/storage/clock.py): hosts whose clocks disagree then still agree on when a lease
runs out and a timer is due, as the times they compare were all read from one clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

_source: Callable[[], float] | None = None


def now() -> float:
    """POSIX seconds on the engine's clock."""
    return time.time() if _source is None else _source()


def use(source: Callable[[], float] | None) -> None:
    """Read the time from `source` from now on in this process (None: the host's clock)."""
    global _source
    _source = source
