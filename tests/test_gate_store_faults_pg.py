"""A worker's gates meeting a terminated connection take the run back, never fail it.

Chaos CI (seed 20261) found a ledger run failed with "OperationalError: terminating
connection due to administrator command": its worker's read of the approval policies
(runs/budgets/gates.py, every few seconds) met a connection pg_terminate_backend had
ended, the gate raised the error, and the step took it for the agent's. The record the
run's session before had written just before the fault stayed at the target with no
effect logged for it.

Here the same, on purpose and at a known moment: the worker's own gates and settings
(`worker_config`, with `store_faults`), its pool and its store, its reconnect
(`wait_for_database`), and every connection terminated right after the run's first
checkpoint, the policies due to be read again, so that the policies' read is the first to
meet it. Collected on PostgreSQL only (tests/conftest.py): SQLite has no backend to end.
"""

import dataclasses
import threading

import psycopg
import pytest
from django.db import connection

from runs.budgets import gates as budget_gates
from runs.db_faults import DATABASE_FAULTS
from runs.durable import control, execute_run
from runs.durable.faults import faults
from runs.storage import database_store
from runs.worker.config import worker_config
from runs.worker.db import ReleasingStore, wait_for_database
from tests.durable.agents_for_tests import REG, WORLD
from tests.support import pools
from tests.support.leases import NoLeases

pytestmark = pytest.mark.django_db(transaction=True)


def terminate_every_other_connection() -> None:
    """pg_terminate_backend of every session on the test database but the one asking (as a
    failover does, and the chaos suite's pg_terminate), each waited for (5 s at most) so
    that the next statement on any of them meets the ended session, not a race with it."""
    params = connection.get_connection_params()
    conninfo = psycopg.conninfo.make_conninfo(**{
        key: value for key, value in params.items()
        if key in ("dbname", "user", "password", "host", "port")})
    with psycopg.connect(conninfo=conninfo, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT bool_and(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
    assert ended, "a session outlived pg_terminate_backend"


@pytest.fixture
def fault_after_first_checkpoint(monkeypatch):
    monkeypatch.setattr(faults, "directory", "")
    struck = []

    def strike():
        if not struck:
            struck.append(True)
            budget_gates.forget_policies()  # the next call's gate reads them again
            terminate_every_other_connection()

    faults.arm("after_checkpoint", strike)
    yield struck
    faults.disarm()


def test_a_gate_reading_on_a_terminated_connection_has_the_run_taken_back(
        fault_after_first_checkpoint, monkeypatch, settings):
    WORLD.reset()
    run = control.launch(database_store(), agent="keys", inputs={"n": 3}, registry=REG)
    errors, ended = [], {}

    def reconnect(error):
        errors.append(error)
        return wait_for_database(error, threading.Event())

    def worker_thread():
        # the worker's settings, but for the codes it claims (the test's agents are not
        # those of the deployed registry) and a lease that needs no renewal: a renewal
        # by a renewer thread had taken the terminated connection before the gate's read
        # (1 of 1 CI runs), and the pool had discarded it
        config = dataclasses.replace(worker_config(), codes=None, lease_seconds=60.0)
        ended["store_faults"] = config.store_faults
        store = ReleasingStore(database_store())
        ended["outcome"] = execute_run(store, run.id, config, registry=REG,
                                       reconnect=reconnect, leases=NoLeases())
        ended["run"] = store.get(run.id)

    # A worker process's connections: a pool (of one, so that the gate's read is sure to
    # take a terminated connection, and the run's next commit a new one), lent to the
    # run's thread around each read and write. Only that thread reads the database while
    # the pool is on: a read of this thread's after the block (the pool closed, the
    # settings not yet put back) made a pool again, which outlived the test, and the next
    # test of this process that made a pool of its own got that one, its connection taken
    # (tests/test_lease_keeper_pg.py waited 30 s for it, in CI).
    with pools.worker_pool(monkeypatch, settings, 1):
        thread = threading.Thread(target=worker_thread)
        thread.start()
        thread.join(60)
        assert not thread.is_alive()
    done = ended["run"]
    assert ended["store_faults"] == DATABASE_FAULTS
    assert ended["outcome"] == "succeeded", done.error
    assert fault_after_first_checkpoint == [True]
    # Taken back after the policies' read itself failed: what reached the reconnect is
    # its error. Before, the step failed the run and the reconnect heard of the failure's
    # commit meeting a lost connection, or (as in the chaos run) the commit found a
    # live one and the run stayed failed.
    assert len(errors) == 1 and isinstance(errors[0], DATABASE_FAULTS)
    assert "terminating connection" in str(errors[0]) or "server closed" in str(errors[0]), \
        errors[0]
    assert done.crash_count == 0 and done.lease_owner is None
    assert len(WORLD.target.work) == 4  # each record once (two in step 2)
    assert len(WORLD.target.requests) == 4  # none was even asked for twice
