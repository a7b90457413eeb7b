"""Worker heartbeats: qcluster's main process calls `record_heartbeat()` on every sweep
tick; it writes at most every HEARTBEAT_SECONDS. The Workers page reads these rows,
together with the leases of running runs (whose renewals are the worker processes'
own heartbeats)."""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import psutil
from django.conf import settings
from django.utils import timezone

from runs.models import WorkerHeartbeat

HEARTBEAT_SECONDS = 2.0
FORGET_AFTER = timedelta(days=1)
_last = {"at": 0.0, "pid": 0}


def record_heartbeat(force: bool = False) -> bool:
    """Upsert this process's row; return True when it wrote."""
    now = time.monotonic()
    pid = os.getpid()
    if not force and _last["pid"] == pid and now - _last["at"] < HEARTBEAT_SECONDS:
        return False
    _last.update(at=now, pid=pid)
    seen = timezone.now()
    WorkerHeartbeat.objects.update_or_create(
        host=socket.gethostname(), pid=pid,
        defaults={"cluster": settings.Q_CLUSTER.get("name", ""), "last_seen": seen,
                  "processes": _children(pid)},
        create_defaults={"cluster": settings.Q_CLUSTER.get("name", ""), "started_at": seen,
                         "last_seen": seen, "processes": _children(pid)})
    WorkerHeartbeat.objects.filter(last_seen__lt=seen - FORGET_AFTER).delete()
    return True


def _children(pid: int) -> list[dict]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            found.append({"pid": child.pid, "rss_mb": round(child.memory_info().rss / 2**20, 1)})
        except psutil.Error:
            continue
    return found
