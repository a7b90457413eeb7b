"""The lease keeper renews on a connection of its own, not one of the worker's pool.

A worker process's run threads share a small pool (runs/worker/db.py). The keeper used to
take its connection from the same pool, so when the runs held every connection (commits
under load) the renewals waited behind them, leases ran out while their runs were alive,
and other workers took the runs over (the deploy bench saw 131 such takeovers in 12 s).
Collected on PostgreSQL only (tests/conftest.py): SQLite has no pool."""

import threading
import time
from types import SimpleNamespace

import pytest
from django.db import connection, transaction

from runs import services
from runs.durable.lease import LeaseState
from runs.worker import execute as worker
from runs.worker.leases import LeaseKeeper
from tests.support import pools
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 2.0


@pytest.fixture
def pool_of_one(monkeypatch, settings):
    """This process's connections as a worker's: a pool of one connection, which a caller
    waits for at most 0.5 s."""
    with pools.worker_pool(monkeypatch, settings, 1, WORKER_DB_POOL_TIMEOUT=0.5):
        yield worker.store()


def held_session(store):
    run = services.run_launch(user=None, agent="steps", inputs={"n": 3})
    claimed = store.claim(run.id, "w1", LEASE, time.time())
    lease = LeaseState(run.id, claimed.run.epoch, "w1", claimed.run.lease_expires_at, None)
    return SimpleNamespace(lease=lease, owner="w1", run=SimpleNamespace(agent="steps"),
                           config=SimpleNamespace(lease_seconds=LEASE))


def test_the_keeper_renews_while_the_runs_hold_every_pooled_connection(pool_of_one):
    session = held_session(pool_of_one)
    first_expiry = session.lease.expires_at
    keeper = LeaseKeeper()
    taken, release = threading.Event(), threading.Event()

    def a_run_committing():  # holds the pool's one connection until told
        with transaction.atomic():
            connection.ensure_connection()
            taken.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=a_run_committing)
    holder.start()
    try:
        assert taken.wait(10)
        keeper.hold(session)
        # renewed twice over: past its first expiry, while the pool stayed taken
        wait_until(lambda: session.lease.expires_at > first_expiry + LEASE, timeout=30,
                   message="the lease renewed while the pool is taken")
        assert not session.lease.fenced
    finally:
        release.set()
        holder.join(30)
        keeper.drop(session)
        keeper.stop()
