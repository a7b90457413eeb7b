"""Round trips to PostgreSQL of a launch and of a worker's claim and commits, counted on
the wire: every wait of psycopg for a server's answer (its `execute` generator, which
the cursors and the connection's own commands use alike) is one round trip. A launch,
a claim, a poll of the due runs and an effect's commit are one round trip each, in
the web process and on a worker's pooled connections (runs/worker/db.py): a store
call that grows a statement (a health check, a BEGIN, a read back) fails here.

PostgreSQL only (tests/conftest.py leaves it out of the SQLite pass)."""

import time

import psycopg
import psycopg._connection_base
import psycopg._cursor_base
import psycopg.generators
import pytest

from runs import services
from runs.durable import records as r
from runs.worker import execute as worker
from tests.support import pools

pytestmark = pytest.mark.django_db(transaction=True)


class RoundTrips:
    def __init__(self):
        self.sent: list[str] = []  # what each round trip sent, for the failure's message
        self.count = 0

    def clear(self) -> list[str]:
        sent, self.sent, self.count = self.sent, [], 0
        return sent


@pytest.fixture
def round_trips(monkeypatch):
    trips = RoundTrips()
    waits = {psycopg._cursor_base: psycopg._cursor_base.execute,
             psycopg.generators: psycopg.generators.execute}

    def counted(original):
        def execute(pgconn):
            trips.count += 1
            return original(pgconn)
        return execute

    for module, original in waits.items():
        monkeypatch.setattr(module, "execute", counted(original))
    cursor_execute = psycopg.Cursor.execute
    command = psycopg._connection_base.BaseConnection._exec_command

    def named_execute(self, query, params=None, **kwargs):
        trips.sent.append(" ".join(str(query).split())[:70])
        return cursor_execute(self, query, params, **kwargs)

    def named_command(self, cmd, *args, **kwargs):
        trips.sent.append(f"(command) {cmd!r}"[:70])
        return command(self, cmd, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", named_execute)
    monkeypatch.setattr(psycopg._connection_base.BaseConnection, "_exec_command", named_command)
    return trips


@pytest.fixture
def worker_pool(monkeypatch, settings):
    """This process's connections as a worker's: the pool of runs/worker/db.py, of one
    connection (so that its statements are prepared once, as on a warm worker's)."""
    with pools.worker_pool(monkeypatch, settings, 1):
        yield worker.store()


def launched(n: int = 3):
    return services.run_launch(user=None, agent="steps", inputs={"n": n})


def effect_commit(run_id: str, step_no: int) -> r.Commit:
    done = r.EffectRecord(branch=1, step_no=step_no, seq=0, kind=r.CALL, tool="bump",
                          digest="d", key=f"{run_id}-{step_no}", idempotent=True, status=r.DONE,
                          result=step_no, attempts=1, started_at=time.time(),
                          finished_at=time.time())
    return r.Commit(run=r.RunChanges(step_no=step_no), effects=[done],
                    events=[("effect", {"key": done.key})])


def test_a_launch_is_one_round_trip(round_trips):
    launched()  # its statement is prepared on this connection
    round_trips.clear()
    run = launched()
    assert round_trips.count == 1, round_trips.sent
    assert services.store().get(run.id).status == r.QUEUED


def test_a_workers_poll_claim_and_commit_are_one_round_trip_each(worker_pool, round_trips):
    store, runs = worker_pool, [launched() for _ in range(2)]
    first = store.claim(runs[0].id, "w1", 30, time.time())  # prepared once per connection
    store.commit(runs[0].id, first.run.epoch, effect_commit(runs[0].id, 1))
    store.due_runs(time.time(), 10)
    round_trips.clear()

    assert store.due_runs(time.time(), 10) == [runs[1].id]
    assert round_trips.count == 1, round_trips.clear()
    round_trips.clear()
    claim = store.claim(runs[1].id, "w1", 30, time.time())
    assert claim.loaded is not None and claim.run.lease_owner == "w1"
    assert round_trips.count == 1, round_trips.clear()
    for step_no in (1, 2):
        round_trips.clear()
        store.commit(runs[1].id, claim.run.epoch, effect_commit(runs[1].id, step_no))
        assert round_trips.count == 1, round_trips.clear()
    assert [e.result for e in store.load(runs[1].id).effects] == [1, 2]
