"""Which agent code the live workers serve (docs/deploys.md).

Every worker tree advertises, in its heartbeat, the code of the agents
its workers have loaded: {fingerprint: {agent, version, upgrade}} (runs/durable/versions.py).
A worker claims its own code's runs, and another code's only when no live tree serves
that code (it stopped, or went silent for LIVE_AFTER_SECONDS) or when its agent says
`upgrade = "replay"` for a later version: `worker_codes()` is that set, read from the
heartbeats. It is the whole routing: a worker polls only the due runs its codes admit
(runs/worker/execute.py), so a run is never handed to a worker of the wrong code.

How fresh the read is. A process keeps it for REFRESH_SECONDS, but while a live tree
serves another code of an agent this process has (a deploy under way: that tree may
stop at any moment and hand its runs back), each poll for due runs reads the
heartbeats again, so the runs it hands back are taken over at the next poll rather than
up to REFRESH_SECONDS later. That read is one query on a table of one row per tree
(rows of trees gone for a day are deleted), made only during such a deploy. A stale
read the other way (a tree of another code just started) costs nothing worse: its
runs' replay moves them, or hands them back.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from runs.durable import versions
from runs.durable.registry import registry
from runs.models import WorkerHeartbeat
from runs.storage import clock
from runs.worker.db import lent_connection

# A tree's heartbeat comes every 2 s (runs/worker/heartbeat.py); silent this long, its
# code is taken for gone. Generous: a loaded machine delays a tree's tick by seconds.
LIVE_AFTER_SECONDS = 10.0
REFRESH_SECONDS = 1.0

_cache: dict = {"at": -1e9, "live": None}
_lock = threading.Lock()


def own_codes() -> dict[str, dict]:
    """This process's agent code, as its heartbeat advertises it."""
    return versions.codes_of(registry.classes())


def live_codes() -> dict[str, dict]:
    """fingerprint -> code of every cluster alive and not stopping."""
    # the database's clock, as each tree wrote its last_seen (runs/worker/heartbeat.py)
    since = clock.now_dt() - timedelta(seconds=LIVE_AFTER_SECONDS)
    live: dict[str, dict] = {}
    for codes in WorkerHeartbeat.objects.filter(last_seen__gte=since, stopping=False) \
            .values_list("codes", flat=True):
        live.update(codes or {})
    return live


def worker_codes(*, polling: bool = False) -> versions.Codes:
    """The runs this process claims, by their code: its own agents' (as registered now),
    and the live clusters' codes, read again every REFRESH_SECONDS, and at every poll for
    due runs (`polling`) while they keep another code of its agents from it."""
    mine = own_codes()
    with _lock:
        live = _cache["live"] if time.monotonic() - _cache["at"] < REFRESH_SECONDS else None
    codes = None if live is None else _shared_codes(mine, live)
    if codes is None or (polling and codes.taken):
        with lent_connection():
            live = live_codes()
        with _lock:
            _cache.update(at=time.monotonic(), live=live)
        codes = _shared_codes(mine, live)
    return codes


def _shared_codes(mine: dict[str, dict], live: dict[str, dict]) -> versions.Codes:
    """The same (frozen) Codes as long as it is equal: every run's config holds one, and
    1,000 held runs held 1,000 copies of its three sets (~1.8 KiB a run)."""
    codes = versions.worker_codes(mine, live)
    with _lock:
        if _cache.get("codes") == codes:
            return _cache["codes"]
        _cache["codes"] = codes
    return codes
