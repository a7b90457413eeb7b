"""A run's path on the schema docs/scaling.md proposes past one PostgreSQL: runs_runevent,
runs_effect and runs_checkpoint partitioned by hash of run_id (declarative
partitioning), each unique constraint extended to contain run_id as a partitioned table
requires. PgStore runs a run on it unchanged, and a run's reads touch one partition.

The tables are swapped inside the test's transaction, which PostgreSQL rolls back with
the DDL at the end: the test database keeps its own schema. PostgreSQL only."""

import math
import re

import pytest
from django.db import connection

from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.models import Checkpoint, Effect, RunEvent
from runs.storage import database_store
from tests.durable.agents_for_tests import REG

# declarative partitioning: collected on PostgreSQL only (tests/conftest.py)
pytestmark = pytest.mark.django_db

PARTITIONS = 4
# What each table gets back, now containing run_id: the primary key, the unique
# constraints (the effect's idempotency key alone becomes (run_id, key): the key starts
# with the run's id, so nothing unique before stops being so) and the other indexes.
SCHEMA = {
    "runs_runevent": [
        "ALTER TABLE runs_runevent ADD PRIMARY KEY (run_id, id)",
        "ALTER TABLE runs_runevent ADD CONSTRAINT event_unique_seq UNIQUE (run_id, seq)",
        "CREATE INDEX webhooks_runevent_status ON runs_runevent (id) WHERE kind = 'status'",
        "CREATE INDEX event_run_status ON runs_runevent (run_id, seq) WHERE kind = 'status'"],
    "runs_effect": [
        "ALTER TABLE runs_effect ADD PRIMARY KEY (run_id, id)",
        "ALTER TABLE runs_effect ADD CONSTRAINT effect_unique_position "
        "UNIQUE (run_id, branch, step_no, seq)",
        "ALTER TABLE runs_effect ADD CONSTRAINT effect_unique_key UNIQUE (run_id, key)",
        "CREATE INDEX effect_live_position ON runs_effect (run_id, branch, step_no) "
        "WHERE NOT superseded",
        "CREATE INDEX effect_metered_finished ON runs_effect (finished_at) "
        "WHERE usage IS NOT NULL"],
    "runs_checkpoint": [
        "ALTER TABLE runs_checkpoint ADD PRIMARY KEY (run_id, id)",
        "ALTER TABLE runs_checkpoint ADD CONSTRAINT checkpoint_unique_number "
        "UNIQUE (run_id, number)",
        "CREATE INDEX checkpoint_latest ON runs_checkpoint (run_id, branch, step_no, number)"],
}


def partition_by_run() -> None:
    with connection.cursor() as cursor:
        for table, statements in SCHEMA.items():
            cursor.execute(f"CREATE TABLE {table}_parted (LIKE {table} INCLUDING DEFAULTS "
                           f"INCLUDING IDENTITY) PARTITION BY HASH (run_id)")
            cursor.execute(f"DROP TABLE {table}")
            cursor.execute(f"ALTER TABLE {table}_parted RENAME TO {table}")
            for n in range(PARTITIONS):
                cursor.execute(f"CREATE TABLE {table}_p{n} PARTITION OF {table} "
                               f"FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {n})")
            for statement in statements:
                cursor.execute(statement)


def partitions_read(queryset) -> set[str]:
    return set(re.findall(r"on (runs_\w+_p\d)\b", queryset.explain()))


def test_a_run_goes_through_pgstore_on_tables_partitioned_by_run_id():
    partition_by_run()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = "
                       "'runs_runevent'::regclass")
        assert cursor.fetchone()[0] == PARTITIONS
    store = database_store()
    run = control.launch(store, agent="steps", inputs={"n": 5}, registry=REG)
    config = WorkerConfig(owner="testhost:1:tok", lease_seconds=1000, slice_seconds=math.inf)
    assert execute_run(store, run.id, config, registry=REG) == Outcome.SUCCEEDED
    head = store.get(run.id).event_seq
    assert list(RunEvent.objects.filter(run_id=run.id).values_list("seq", flat=True)
                .order_by("seq")) == list(range(1, head + 1))
    assert Effect.objects.filter(run_id=run.id).count() >= 5
    assert Checkpoint.objects.filter(run_id=run.id).exists()
    # a run's reads are pruned to its one partition
    for queryset in (RunEvent.objects.filter(run_id=run.id, seq__gt=2).order_by("seq"),
                     Effect.objects.filter(run_id=run.id).order_by("-id")[:100],
                     Checkpoint.objects.filter(run_id=run.id).order_by("-number")):
        assert len(partitions_read(queryset)) == 1, queryset.explain()
