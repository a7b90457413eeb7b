"""A worker's run threads hold no Django connection wrapper between their store calls:
they borrow one of the process's (runs/worker/db.py, `lent_connection`), at most as many
at once as the pool has connections and a few more, and give it back. A wrapper is
~5.6 KiB, and 1,000 waiting runs held 1,000 of them (tests/cluster/test_tree_memory.py
counts the memory). Collected on PostgreSQL only (tests/conftest.py): SQLite has no pool."""

import threading

import pytest
from django.db import connection, connections

from runs.worker import db as worker_db
from tests.support import pools

pytestmark = pytest.mark.django_db(transaction=True)

THREADS, POOL = 30, 2


class Inner:
    """A store whose one call notes the wrapper it ran on and how many ran at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.wrappers, self.now, self.most = set(), 0, 0

    def get(self, run_id):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.wrappers.add(id(connections["default"]))
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.01)")
        finally:
            with self.lock:
                self.now -= 1


def test_run_threads_borrow_wrappers_and_keep_none(monkeypatch, settings):
    with pools.worker_pool(monkeypatch, settings, POOL):
        inner, held, failed = Inner(), [], []
        all_called = threading.Barrier(THREADS + 1)

        def run():
            try:
                worker_db.ReleasingStore(inner).get("r")
                held.append(connections.all(initialized_only=True))
            except Exception as exc:  # noqa: BLE001 - reported below
                failed.append(exc)
            all_called.wait(30)

        threads = [threading.Thread(target=run) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        all_called.wait(30)  # every thread alive, each after its call
        for thread in threads:
            thread.join(30)
        assert failed == []
        assert held == [[]] * THREADS  # none kept a wrapper
        assert len(inner.wrappers) <= POOL + worker_db.WRAPPERS_OVER_POOL, inner.wrappers
        assert inner.most <= POOL + worker_db.WRAPPERS_OVER_POOL


def test_a_thread_with_its_own_wrapper_uses_it_and_keeps_it_closed(monkeypatch, settings):
    """Django made it (an ORM query outside a store call): the store call uses it, its
    connection goes back to the pool, and the wrapper stays the thread's, as Django and
    whatever holds it expect (a test's transaction did: lent away, its connection was
    left open past the test database's teardown)."""
    with pools.worker_pool(monkeypatch, settings, POOL):
        inner, seen = Inner(), {}

        def run():
            with connection.cursor() as cursor:  # an ORM query outside a store call
                cursor.execute("SELECT 1")
            own = connections["default"]
            worker_db.ReleasingStore(inner).get("r")
            seen.update(own=id(own), after=connections.all(initialized_only=True),
                        connected=own.connection is not None)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
        assert inner.wrappers == {seen["own"]}
        assert [id(w) for w in seen["after"]] == [seen["own"]] and not seen["connected"]
