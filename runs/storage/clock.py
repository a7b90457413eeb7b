"""The database's clock, which a worker tree gives the engine (runs/durable/clock.py;
`manage.py worker` installs it) and reads itself for its heartbeats and ticks: so that
hosts whose clocks disagree still agree on leases and timers.

A lease runs out, and a timer is due, when a stored time (lease_expires_at, wake_at, a
sleep's recorded wake time) is at or before now. Taken from each host's own clock, a
host an hour ahead would find every lease run out and take runs from live workers, and
the leases it wrote would keep its runs from everyone for an hour after its death; an
hour behind, its leases would be out as it wrote them, and a timer another host set
would wait an hour longer on it. With every time a worker writes or compares read from
one clock, none of that depends on the hosts' clocks.

The database's time is this process's clock plus an offset, measured against
PostgreSQL's clock_timestamp() (the midpoint of the round trip taken for the moment the
database read it) at most every REFRESH_SECONDS per process, on the connection of the
call that needs it; a clock stepped meanwhile is followed at the next measure. Within
TOLERANCE the clocks are taken to agree (the offset stays 0, or what it was), so that a
round trip's noise does not move the times written. SQLite runs on the host that writes
it: its clock is the host's.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from datetime import timezone as dt_timezone

from django.db import DatabaseError, connection

REFRESH_SECONDS = 30.0
RETRY_SECONDS = 1.0  # after a measure the database did not answer
TOLERANCE = 0.25  # seconds: far below any lease, far above a round trip's asymmetry

logger = logging.getLogger("agentops.clock")
_state = {"offset": 0.0, "measured_at": None}
_lock = threading.Lock()


def offset() -> float:
    """Seconds to add to this process's clock to read the database's. One thread measures
    when it is time; the others, and every thread while the database is away, read the
    last offset measured (a clock's offset changes slowly): the time is never what a
    caller waits for."""
    measured_at = _state["measured_at"]
    stale = measured_at is None or time.monotonic() - measured_at >= REFRESH_SECONDS
    if stale and _lock.acquire(blocking=False):
        try:
            _state["offset"] = _settled(_state["offset"], _measure())
            _state["measured_at"] = time.monotonic()
        except DatabaseError as exc:
            logger.warning("the database's clock not read (%s): the last offset holds", exc)
            _state["measured_at"] = time.monotonic() - REFRESH_SECONDS + RETRY_SECONDS
        finally:
            _lock.release()
    return _state["offset"]


def now() -> float:
    """The database's time, in POSIX seconds."""
    return time.time() + offset()


def now_dt() -> datetime:
    return datetime.fromtimestamp(now(), tz=dt_timezone.utc)


def _measure() -> float:
    if connection.vendor != "postgresql":
        return 0.0
    with connection.cursor() as cursor:
        before = time.time()
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        after = time.time()
        (database,) = cursor.fetchone()
    return database - (before + after) / 2


def _settled(current: float, measured: float) -> float:
    if abs(measured - current) <= TOLERANCE:
        return current
    return 0.0 if abs(measured) <= TOLERANCE else measured


def forget() -> None:
    """Measure again at the next use (a test that moves a process's clock)."""
    _state["measured_at"] = None
