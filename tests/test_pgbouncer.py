"""PgStore behind PgBouncer in transaction mode, the usual way to put many worker hosts on
one PostgreSQL: a real pgbouncer (Debian's) started here on a free port, with a pool of
two server connections for the many threads of the contract (parallel groups, racing
claims, zombies), and the store's contract run through it as a deployment runs it
(AGENTOPS_DB_TRANSACTION_POOLING: PgStore prepares no statement). With preparing on,
the same tests fail: a statement prepared on the server connection of one transaction
is missing from the next one's, or already there under its name ("prepared statement
_pg3_0 already exists"). Collected when the suite runs on PostgreSQL
(tests/conftest.py)."""

import pytest
from django.db import connection, connections

from runs.storage import database_store
from runs.storage.pg import PgStore
from tests.durable.contract_parallel import ParallelContract
from tests.support.fleet_services import PgBouncer
from tests.support.store_contract import DatabaseStoreContract

POOL_SIZE = 2  # server connections per database: far fewer than the threads using them


@pytest.fixture(scope="module")
def pgbouncer(django_db_setup):
    """The port of a pgbouncer in transaction mode in front of the test database's server
    (the fleet tests' own, on loopback), stopped and removed afterwards."""
    # 0: no limit on a transaction left idle (a fleet's is below its lease, docs/fleet.md);
    # the contract's threads hold none, and a test that did should fail, not be cut off
    bouncer = PgBouncer("127.0.0.1", connection.settings_dict, pool_size=POOL_SIZE,
                        idle_transaction_timeout=0)
    try:
        yield bouncer
    finally:
        bouncer.stop()


# Marked for the database it never touches through Django: pytest-django creates the test
# database only for a session whose tests are marked, and run alone this one's PgBouncer
# would front a database that does not exist.
@pytest.mark.django_db
def test_pgbouncer_keeps_answering_after_logging_more_than_a_pipe_holds(pgbouncer):
    """Each connection logs a few lines; far more than 64 KiB of them (a pipe's buffer)
    must not stop the pooler, as it did when its log went to a pipe nobody read."""
    for _ in range(2_000):  # about 320 B of log each: 2 pipes' worth in about 420
        assert pgbouncer.answers()
        if pgbouncer.log.stat().st_size > 2 * 65_536:
            break
    assert pgbouncer.log.stat().st_size > 2 * 65_536


@pytest.mark.django_db(transaction=True)
class TestPgStoreBehindPgBouncer(ParallelContract, DatabaseStoreContract):
    @pytest.fixture
    def store(self, transactional_db, pgbouncer, settings):
        settings.AGENTOPS = {**settings.AGENTOPS, "DB_TRANSACTION_POOLING": True}
        database = connections.settings["default"]  # every thread's connection reads it
        direct = database["HOST"], database["PORT"]
        connection.close()
        database["HOST"], database["PORT"] = pgbouncer.address, pgbouncer.port
        try:
            store = database_store()
            assert type(store) is PgStore and not store.prepare
            yield store
        finally:
            connection.close()
            database["HOST"], database["PORT"] = direct
