"""Database connections in worker processes that hold many runs in threads.

A thread of Django has a connection of its own; with hundreds of runs a process
that would be hundreds of PostgreSQL connections (max_connections is 100 by
default), most of them idle while tools wait on the network. Instead each
worker process gets a small psycopg pool, created after the fork (a pool
inherited across fork is shared by parent and child), and a run's
thread holds a connection only while it talks to the database: the store is
wrapped so that every call hands the connection back to the pool.

Nor does a run's thread keep a Django connection wrapper between its calls: a wrapper
(its operations, features, client and introspection objects) is ~5.6 KiB, and 1,000
waiting runs held 1,000 of them. A thread that needs one borrows an idle one of the
process (`lent_connection`, around every store call and the few reads of its own that
a run's thread makes), and gives it back when it lets its connection go
(`release_connection`, after every store call and before every tool call): a process
keeps as many wrappers as its threads use at once. Made and dropped per call instead, they cost more than they saved: each is a
cycle of objects that only the cyclic collector frees.

SQLite has no pool: each thread keeps its own connection (a file handle).

Connection faults (a terminated backend, a database restart) are survived: a run
whose store call failed waits here for the database to answer and takes itself
back (runs/durable/executor.py, `reconnect`). The pool does not check a connection
before handing it out: that was a round trip more on every store call.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import weakref

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections
from django.db.utils import load_backend

from runs.db_faults import DATABASE_FAULTS

logger = logging.getLogger("agentops.db")

RECONNECT_FIRST_DELAY = 0.05
RECONNECT_MAX_DELAY = 1.0

# Connections inherited from the parent at fork: closing them would end the
# parent's session on the shared socket, dropping them would let the garbage
# collector do the same. They are kept, unused, for the life of the process.
_inherited = []
_pooled = {"on": False}         # this process's threads share a pool (and wrappers)
_idle_wrappers: queue.SimpleQueue = queue.SimpleQueue()
_lendable_wrappers: weakref.WeakSet = weakref.WeakSet()  # made here, lent in turn
# Lent at once: as many as the pool has connections, and a few more to wait on them. A
# burst of 1,000 claims made 1,000 (each waiting for a connection in its store call).
WRAPPERS_OVER_POOL = 4
_lendable = {"slots": threading.BoundedSemaphore(1), "wait": 30.0}


def use_pool_in_this_process() -> bool:
    """Switch this (freshly forked) worker process to a pool of its own."""
    size = settings.AGENTOPS["WORKER_DB_POOL_SIZE"]
    db = connections.settings["default"]
    if db["ENGINE"] != "django.db.backends.postgresql" or size <= 0:
        return False
    wrapper = connections["default"]
    if wrapper.connection is not None:
        _inherited.append(wrapper.connection)
        wrapper.connection = None
    # Every thread's wrapper reads this same dict, so the pool is process-wide.
    db["OPTIONS"] = {**db.get("OPTIONS", {}), "pool": {
        "min_size": min(2, size), "max_size": size,
        "timeout": settings.AGENTOPS["WORKER_DB_POOL_TIMEOUT"],
        "reconnect_timeout": settings.AGENTOPS["DB_POOL_RECONNECT_SECONDS"]}}
    db["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    # No check as the pool hands a connection out: it was an empty query, a round trip
    # before each claim and each commit (two where one does). A dead connection fails
    # the store call that uses it, and the run reconnects (wait_for_database, which
    # checks the pool's other idle connections at once); a failed poll or claim only
    # drops the connection, and the slot looks again at its next poll.
    db["CONN_HEALTH_CHECKS"] = False
    _pooled["on"] = True
    _lendable.update(slots=threading.BoundedSemaphore(size + WRAPPERS_OVER_POOL),
                     wait=settings.AGENTOPS["WORKER_DB_POOL_TIMEOUT"])
    return True


def use_own_connection_in_this_thread() -> None:
    """This thread talks to the database on a connection of its own, kept open, outside
    the pool: for the thread every run of the process depends on (the lease keeper). In
    the pool it waited behind the runs' threads for a connection: under load leases ran
    out while their runs were alive and well, and other workers took them over."""
    if not _pooled["on"]:
        return
    # thread-local: the other threads keep the pooled wrapper
    connections[DEFAULT_DB_ALIAS] = _unpooled(DEFAULT_DB_ALIAS)


def _unpooled(alias: str):
    """A connection to the default database outside the pool, kept open until closed."""
    params = dict(connections.settings[DEFAULT_DB_ALIAS])
    params["OPTIONS"] = {k: v for k, v in params["OPTIONS"].items() if k != "pool"}
    params["CONN_MAX_AGE"] = None
    return load_backend(params["ENGINE"]).DatabaseWrapper(params, alias)


def _answers_outside_the_pool() -> None:
    """Raises one of DATABASE_FAULTS while the database does not answer. Asked through a
    pool that has given up reconnecting, a caller waits the pool's whole timeout (30 s)
    even once the database is back: longer than a lease, and the run, waiting to take
    itself back, was taken over "after a crash" instead (CI: a database restart)."""
    probe = _unpooled("reconnect-probe")
    try:
        with probe.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        probe.close()


def pooled() -> bool:
    """This thread's wrapper takes its connections from the process's pool."""
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


def _own_wrapper():
    """The wrapper this thread holds now, if any (asked without making one)."""
    return next((wrapper for wrapper in connections.all(initialized_only=True)
                 if wrapper.alias == DEFAULT_DB_ALIAS), None)


@contextlib.contextmanager
def lent_connection():
    """A thread that holds no wrapper borrows an idle one of the process for the block;
    `release_connection` gives it back."""
    if not _pooled["on"] or _own_wrapper() is not None:
        yield
        return
    slots = _lendable["slots"]
    # As the pool itself would after its own timeout: a database fault for the caller.
    if not slots.acquire(timeout=_lendable["wait"]):
        raise OperationalError(f"no database connection free in {_lendable['wait']:.0f} s")
    try:
        wrapper = _idle_wrappers.get_nowait()
    except queue.Empty:
        params = connections.settings[DEFAULT_DB_ALIAS]  # the process's, with its pool
        wrapper = load_backend(params["ENGINE"]).DatabaseWrapper(params, DEFAULT_DB_ALIAS)
        wrapper.inc_thread_sharing()  # used by one thread at a time, many in turn
        _lendable_wrappers.add(wrapper)
    connections[DEFAULT_DB_ALIAS] = wrapper
    try:
        yield
    finally:
        try:
            if _own_wrapper() is wrapper:  # still lent (not given back inside the block)
                _give_back(wrapper)
        finally:
            slots.release()


def release_connection() -> None:
    """Give this thread's connection back to the pool (outside a transaction), and a
    wrapper it borrowed to the process's idle ones."""
    wrapper = _pooled_wrapper()
    if wrapper is not None and not wrapper.in_atomic_block:
        _give_back(wrapper)


def _pooled_wrapper():
    """This thread's wrapper, if it takes its connections from the process's pool."""
    wrapper = _own_wrapper() if _pooled["on"] else None
    if wrapper is None or not wrapper.settings_dict.get("OPTIONS", {}).get("pool"):
        return None
    return wrapper


def _give_back(wrapper) -> None:
    """The connection back to the pool; a borrowed wrapper back to the idle ones. A
    thread's own (Django made it: an ORM query outside a store call) stays the thread's,
    as Django and whatever holds it expect (a test's transaction did)."""
    wrapper.close()
    if wrapper not in _lendable_wrappers:
        return
    del connections[DEFAULT_DB_ALIAS]
    # One closed inside a transaction is marked for a rollback: no other thread gets it.
    if not wrapper.in_atomic_block:
        _idle_wrappers.put(wrapper)


class ReleasingStore:
    """The store, with the thread's connection back in the pool after every call:
    a run holds a connection while it commits, never while its tool waits. Every
    method of the Store protocol (runs/durable/store.py), each by name."""

    def __init__(self, inner):
        self._inner = inner

    @contextlib.contextmanager
    def _released(self):
        with lent_connection():
            try:
                yield
            finally:
                release_connection()

    def create_run(self, run):
        with self._released():
            return self._inner.create_run(run)

    def get(self, run_id):
        with self._released():
            return self._inner.get(run_id)

    def children(self, run_id, *, active_only=False):
        with self._released():
            return self._inner.children(run_id, active_only=active_only)

    def load(self, run_id):
        with self._released():
            return self._inner.load(run_id)

    def claim(self, run_id, owner, lease_seconds, now, *, codes=None):
        with self._released():
            return self._inner.claim(run_id, owner, lease_seconds, now, codes=codes)

    def commit(self, run_id, epoch, commit):
        with self._released():
            return self._inner.commit(run_id, epoch, commit)

    def renew(self, run_id, epoch, lease_expires_at):
        with self._released():
            return self._inner.renew(run_id, epoch, lease_expires_at)

    def renew_leases(self, leases, lease_expires_at):
        with self._released():
            return self._inner.renew_leases(leases, lease_expires_at)

    def live_leases(self, owner_prefix, now):
        with self._released():
            return self._inner.live_leases(owner_prefix, now)

    def due_runs(self, now, limit=100, *, exclude=(), codes=None):
        with self._released():
            return self._inner.due_runs(now, limit, exclude=exclude, codes=codes)

    def history(self, run_id, query=None):
        with self._released():
            return self._inner.history(run_id, query)

    def close_thread_resources(self):
        """Even inside a transaction (after a fault): the connection closed, a pooled
        wrapper given back; a thread that holds none has nothing to close."""
        wrapper = _pooled_wrapper()
        if wrapper is not None:
            _give_back(wrapper)
        elif not _pooled["on"] or _own_wrapper() is not None:
            self._inner.close_thread_resources()


def wait_for_database(error: BaseException, stop: threading.Event) -> bool:
    """After `error`, True once the database answers again on a fresh connection.

    False for an error that is not a connection fault (a bug stays a failure), and
    once `stop` is set: a stopping worker leaves the run to its lease and the sweep.
    """
    if not isinstance(error, DATABASE_FAULTS):
        return False
    delay = RECONNECT_FIRST_DELAY
    while not stop.is_set():
        try:
            connection.close()  # the broken one: back to the pool, which drops it
            if pooled():
                _answers_outside_the_pool()
            _drop_dead_pooled_connections()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except DATABASE_FAULTS as exc:
            logger.warning("database not answering yet (%s); retrying in %.2f s", exc, delay)
            stop.wait(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
        finally:
            release_connection()
    return False


def _drop_dead_pooled_connections() -> None:
    """The pool's idle connections likely died with the one that failed (a restart,
    pg_terminate_backend). The pool finds a dead one only when it is about to hand
    it out, and then sleeps before the next try (1 s, then 2 s...): checking them
    all now spares every thread of this process that wait."""
    pool = connection.pool if pooled() else None
    if pool is not None:
        pool.check()
