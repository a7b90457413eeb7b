"""Worker heartbeats: a worker tree's duties (runs/worker/sweep.py, kept by its worker 1)
call `record_heartbeat()` on every tick. The row is the tree's main process's: it lists
every process under the main (its role, whether it is alive, its status and memory), and
recently gone ones as dead. It is
written at most every HEARTBEAT_SECONDS, and at once when a process died, was
stopped or appeared, so a dead process is listed as alive for at most one tick.
The Workers page reads these rows, together with the leases of running runs (whose
renewals are the worker processes' own heartbeats).

A tree's main writes its row as it starts (`record_start`). A stopping tree says so
once (`record_stopping`, by each of its workers as its stop signal comes, before it
hands a run back), and its row says so from then on: the heartbeats after it leave the
row alone, so that whatever the order of a tree's processes, once one of its runs is
handed back, no tree takes its code for served.

A main process that died cannot say so: the next heartbeat of any tree on the same
host rewrites a dead main's row with what the kernel says of its processes now.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import psutil
from django.conf import settings

from runs.models import WorkerHeartbeat
from runs.storage import clock
from runs.worker import fleet, proctree, roles

HEARTBEAT_SECONDS = 2.0
FORGET_AFTER = timedelta(days=1)
GONE_SHOWN_SECONDS = 60.0   # how long a process that died stays listed, as dead
_last = {"at": 0.0, "pid": 0, "shape": None, "gone": {}, "listed": []}


def record_heartbeat(force: bool = False, main: int | None = None) -> bool:
    """Upsert the row of the tree of `main` (this process by default); return True when
    it wrote. A row that says its tree is stopping is left as it is."""
    now = time.monotonic()
    pid = main or os.getpid()
    if _last["pid"] != pid:
        _last.update(pid=pid, shape=None, gone={}, listed=[])
    processes = _tree(pid)
    known = {p["pid"]: p["role"] for p in _last["listed"]}
    for entry in processes:  # a zombie has no command line left to tell its role
        if entry["role"] == "?":
            entry["role"] = known.get(entry["pid"], "?")
    shape = {(p["pid"], p["status"]) for p in processes}
    if not force and shape == _last["shape"] and now - _last["at"] < HEARTBEAT_SECONDS:
        return False
    listed = processes + _gone(processes, now)
    _last.update(at=now, shape=shape)
    seen = clock.now_dt()  # the database's clock: other hosts compare it with theirs
    host = socket.gethostname()
    cluster = settings.AGENTOPS["CLUSTER_NAME"]
    codes = fleet.own_codes()
    row = WorkerHeartbeat.objects.filter(host=host, pid=pid)
    if not row.filter(stopping=False).update(cluster=cluster, last_seen=seen,
                                             processes=listed, codes=codes):
        WorkerHeartbeat.objects.get_or_create(
            host=host, pid=pid, defaults={"cluster": cluster, "started_at": seen,
                                          "last_seen": seen, "processes": listed,
                                          "codes": codes})
    _bury_dead_mains(host, pid)
    WorkerHeartbeat.objects.filter(last_seen__lt=seen - FORGET_AFTER).delete()
    return True


def record_start() -> None:
    """A tree's main, before it forks: its row, new (a pid of an old tree's row is
    reused, in a container every time): serving its code, stopping no more."""
    seen = clock.now_dt()
    WorkerHeartbeat.objects.update_or_create(
        host=socket.gethostname(), pid=os.getpid(),
        defaults={"cluster": settings.AGENTOPS["CLUSTER_NAME"], "started_at": seen,
                  "last_seen": seen, "processes": [], "codes": fleet.own_codes(),
                  "stopping": False})


def record_stopping(main: int) -> None:
    """The tree of `main` takes no more work: its agent code is no longer served
    (runs/worker/fleet.py), so a live tree of other code may take its runs over as they
    are handed back. The first of its processes to say so sets last_seen, the moment."""
    WorkerHeartbeat.objects.filter(host=socket.gethostname(), pid=main, stopping=False) \
        .update(stopping=True, last_seen=clock.now_dt())


def _tree(pid: int) -> list[dict]:
    try:
        children = proctree.children(pid, recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            with child.oneshot():
                status = child.status()
                rss = child.memory_info().rss if status != psutil.STATUS_ZOMBIE else 0
                found.append(_entry(child.pid, roles.role_of(child), status, rss))
        except psutil.NoSuchProcess:
            continue
    return found


def _entry(pid: int, role: str, status: str, rss: int = 0) -> dict:
    return {"pid": pid, "role": role or "?", "status": status,
            "alive": status not in roles.DEAD_STATUSES, "rss_mb": round(rss / 2**20, 1)}


def _gone(processes: list[dict], now: float) -> list[dict]:
    """Processes listed before and not there any more: dead, shown for a while."""
    gone = _last["gone"]
    present = {p["pid"] for p in processes}
    for pid in present:
        gone.pop(pid, None)
    for pid, entry in list(gone.items()):
        if now - entry["since"] > GONE_SHOWN_SECONDS:
            del gone[pid]
    for entry in _last["listed"]:
        if entry["pid"] not in present and entry["pid"] not in gone:
            gone[entry["pid"]] = dict(entry, since=now)
    _last["listed"] = processes
    return [dict(_entry(pid, entry["role"], roles.GONE)) for pid, entry in gone.items()]


def _bury_dead_mains(host: str, pid: int) -> None:
    for row in WorkerHeartbeat.objects.filter(host=host).exclude(pid=pid):
        if roles.is_alive(row.pid) or not any(p.get("alive") for p in row.processes):
            continue
        row.processes = [_entry(p["pid"], p.get("role", "?"), roles.status_of(p["pid"]))
                         for p in row.processes]
        row.save(update_fields=["processes"])
