"""Event retention on PostgreSQL: two trees pruning one large run at once delete each
row once and count it once (each batch locks the run row), and the space of what was
deleted is reused by the events written after it (the table does not grow for ever).

PostgreSQL only: row locks and relation sizes."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Run, RunEvent
from runs.storage.event_retention import Policy, prune
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)  # PostgreSQL only: tests/conftest.py

EVENTS = 20_000


def ended_run(run_id: str, events: int, statuses=(1, 2)) -> Run:
    """An ended run with `events` events written by one statement: status events at
    `statuses` and at its end, log lines between."""
    run = Run.objects.create(id=run_id, agent="ticker", agent_version="1", status="succeeded",
                             event_seq=events,
                             finished_at=timezone.now() - timedelta(days=31))
    kept = ",".join(str(seq) for seq in (*statuses, events))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
            f"SELECT %s, n, CASE WHEN n IN ({kept}) THEN 'status' ELSE 'log' END, "
            "jsonb_build_object('message', repeat('x', 200), 'status', 'running'), now() "
            "FROM generate_series(1, %s) AS n", [run_id, events])
    return run


def test_two_trees_pruning_one_run_at_once_delete_and_count_each_event_once():
    run = ended_run("a" * 32, EVENTS)
    policy = Policy(days=30, batch=500)
    start, reports, errors = threading.Barrier(2), [], []

    def tree():
        try:
            start.wait(timeout=30)
            reports.append(prune(policy=policy))
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=tree) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(reports) == 2
    assert sum(report.events for report in reports) == EVENTS - 3
    run.refresh_from_db()
    assert run.events_pruned == EVENTS - 3 and run.events_pruned_before == EVENTS + 1
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)
                .order_by("seq")) == [1, 2, EVENTS]


def heap_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('runs_runevent')")
        return cursor.fetchone()[0]


def other_snapshots() -> int:
    """Sessions of this database holding a snapshot or a transaction id: while one is
    older than the deletes, VACUUM may not free their rows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() "
                       "AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)")
        return cursor.fetchone()[0]


def test_the_space_of_pruned_events_is_reused_by_later_ones():
    """The table's rows, measured without its indexes: a B-tree page that VACUUM empties
    is recycled only once no transaction anywhere on the server is older than its
    deletion, which on a server other tests share (CI's) this test cannot decide."""
    before = heap_bytes()
    ended_run("b" * 32, EVENTS)
    grown = heap_bytes() - before
    prune(policy=Policy(days=30, batch=5000))
    wait_until(lambda: other_snapshots() == 0, 30, message="no older snapshot in this database")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM runs_runevent")  # what autovacuum does after the deletes
    ended_run("c" * 32, EVENTS)
    regrown = heap_bytes() - before - grown
    # the second run's events fill the pages the first's freed
    assert regrown < grown / 4, (grown, regrown)
