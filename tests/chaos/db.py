"""The harness's own database access, which must survive the faults it injects:
a call that meets a restarting PostgreSQL closes the connection and tries again."""

from __future__ import annotations

import time

from django.db import DatabaseError, InterfaceError, OperationalError, connections


# timeout: as long as stack.py allows a PostgreSQL restart (the pg_restart fault), through
# which the database is unreachable until the server is up again
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


def freeze_without_the_write_lock(stop, cont, attempts: int = 40) -> bool:
    """Call `stop` (which SIGSTOPs processes) so that none is left frozen holding
    SQLite's one write lock: every write, the harness's own included, would wait on it
    until the thaw, which the harness's single loop could then never reach. So freeze,
    check that a write can begin, and if not thaw (`cont`) and try again: the holder
    commits within moments once it runs. False when every try found the lock held."""
    from django.db import connection

    for _ in range(attempts):
        stop()
        if connection.vendor != "sqlite" or _write_lock_free(connection.settings_dict["NAME"]):
            return True
        cont()
        time.sleep(0.5)  # not a synchronisation: the next try checks the lock again
    return False


def _write_lock_free(path: str) -> bool:
    import sqlite3

    probe = sqlite3.connect(path, timeout=2, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # database is locked
        return False
    finally:
        probe.close()
