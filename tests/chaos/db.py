"""The harness's own database access, which must survive the faults it injects:
a call that meets a restarting PostgreSQL closes the connection and tries again."""

from __future__ import annotations

import time

from django.db import DatabaseError, InterfaceError, OperationalError, connections


def db_call(fn, *args, timeout: float = 120.0, **kwargs):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            _reset()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the database stayed unreachable for {timeout} s") from exc
            time.sleep(0.3)
        except DatabaseError as exc:
            # psycopg reports a connection killed mid-statement in several ways
            if "terminat" not in str(exc) and "connection" not in str(exc).lower():
                raise
            _reset()
            time.sleep(0.3)


def _reset() -> None:
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:
            conn.connection = None


def holders(pids: list[int]) -> dict[int, list[str]]:
    """{worker pid: [ids of the runs it holds a lease on]}."""
    from runs.models import Run

    def read():
        found: dict[int, list[str]] = {}
        rows = Run.objects.filter(lease_owner__isnull=False).values_list("id", "lease_owner")
        wanted = set(pids)
        for run_id, owner in rows:
            pid = int(owner.split(":")[1])
            if pid in wanted:
                found.setdefault(pid, []).append(run_id)
        return found
    return db_call(read)


def running_runs() -> list[str]:
    from runs.models import Run
    return list(Run.objects.filter(status="running").values_list("id", flat=True))
