"""Every statement of a run's own path names that run (docs/scaling.md): its launch,
claim and load, its commits (effects, checkpoints, events, the ending) and its lease's
renewal. Partitioned by run id, or distributed by it (Citus), each of them reaches one
partition or one shard. The statements that span runs are the worker tree's, not a
run's: the due runs' poll, the batch renewal of a tree's leases, the leases a tree
holds (runs/storage/orm.py); they read runs_run alone. PostgreSQL only: PgStore's
single statements are what runs there."""

import math
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.storage import database_store, pg
from tests.durable.agents_for_tests import REG

# PgStore's statements: collected on PostgreSQL only (tests/conftest.py)
pytestmark = pytest.mark.django_db(transaction=True)

TABLES = re.compile(r"\bruns_(run|runevent|effect|checkpoint)\b")


def statements_of_a_run(monkeypatch) -> tuple[str, list[str]]:
    """The run's id, and the text of each statement its path sent, with its values."""
    sent = []
    real = pg.execute

    def recorded(sql, params, *, prepare):
        sent.append(sql + " -- " + repr(params))
        return real(sql, params, prepare=prepare)

    monkeypatch.setattr(pg, "execute", recorded)
    store = database_store()
    with CaptureQueriesContext(connection) as orm:
        run = control.launch(store, agent="steps", inputs={"n": 5}, registry=REG)
        config = WorkerConfig(owner="testhost:1:tok", lease_seconds=1000, slice_seconds=math.inf)
        assert execute_run(store, run.id, config, registry=REG) == Outcome.SUCCEEDED
        store.renew(run.id, 1, 2e9)
    return run.id, sent + [q["sql"] for q in orm.captured_queries]


def test_every_statement_on_a_runs_path_names_that_run(monkeypatch):
    run_id, statements = statements_of_a_run(monkeypatch)
    touching = [s for s in statements if TABLES.search(s)]
    assert len(touching) >= 5, statements  # launch, claim, commits, renewal
    for statement in touching:
        assert run_id in statement, statement
