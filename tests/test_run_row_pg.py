"""The run row on PostgreSQL: updated in place on the effect path, with only the indexes
a page, the API or the claim needs, each of them used.

An update that changes no indexed column of a row, and finds room for the new version
on the row's page (runs_run's fillfactor), is a HOT update: no index entry is
written. The effect path (an effect's commit, a step's checkpoint, a lease renewal)
changes counters and times only, so its updates of runs_run must be HOT.

PostgreSQL only."""

import math
import time

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.operator.selectors import PAGE_SIZE, filtered_runs
from runs.selectors import run_list
from runs.storage import database_store
from runs.storage.orm import due_runs_queryset
from tests.durable.agents_for_tests import REG

# PostgreSQL's own statistics, indexes and plans: collected on PostgreSQL only
# (tests/conftest.py).
pytestmark = pytest.mark.django_db(transaction=True)

EFFECTS = 50
# What the run pages, the API, the claim and the sweep read by (runs/models.py, Run.Meta).
INDEXES = {
    "runs_run_pkey": "(id)",
    "run_owner_created": "(owner_id, created_at DESC)",
    "run_status_created": "(status, created_at DESC)",
    "run_agent_created": "(agent, created_at DESC)",
    "run_created": "(created_at DESC)",
    "run_sweep_active": "(status) WHERE",
    "run_sweep_wake": "(wake_at) WHERE",
    "run_lease_owner": "(lease_owner varchar_pattern_ops) WHERE",
    "run_parent": "(parent_id) WHERE",
    "run_finished": "(finished_at) WHERE",
    "run_retention_due": "(finished_at) WHERE",
    "run_spawn_key": "UNIQUE INDEX run_spawn_key ON public.runs_run USING btree (spawn_key) WHERE",
}


def run_updates() -> tuple[int, int]:
    """runs_run's (updates, HOT updates) so far, this backend's included."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                       "WHERE relname = 'runs_run'")
        return cursor.fetchone()


def test_the_effect_paths_updates_of_the_run_row_are_hot():
    store = database_store()
    run = control.launch(store, agent="steps", inputs={"n": EFFECTS}, registry=REG)
    config = WorkerConfig(owner="testhost:1:tok", lease_seconds=1000, slice_seconds=math.inf)
    before = run_updates()
    assert execute_run(store, run.id, config, registry=REG) == Outcome.SUCCEEDED
    updates, hot = (after - start for after, start in zip(run_updates(), before, strict=True))
    # The claim, the first step's move to running and the ending change indexed columns
    # (lease_owner, status); every effect's and checkpoint's commit does not.
    assert updates >= EFFECTS, updates
    assert hot >= 0.9 * updates, f"{hot} of {updates} updates of runs_run were HOT"


def test_runs_run_has_only_the_indexes_its_readers_need():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs_run'")
        found = dict(cursor.fetchall())
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'runs_run'")
        options = cursor.fetchone()[0]
    assert set(found) == set(INDEXES), sorted(found)
    for name, shape in INDEXES.items():
        assert shape in found[name], (name, found[name])
    assert "fillfactor=70" in options


def plan(queryset) -> str:
    """The plan of `queryset` with sequential scans priced out: a scan of runs_run left
    in it means that no index serves the query."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            sql, params = queryset.query.sql_with_params()
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")


@pytest.mark.parametrize("name", ["claim's due runs", "my runs", "my active runs", "all runs",
                                  "status", "agent", "worker", "children", "api children",
                                  "spawn key", "workers' finished rate"])
def test_each_reader_of_runs_run_uses_an_index(name, users):
    from runs.models import Run

    alice = users["alice"]
    queries = {
        "claim's due runs": due_runs_queryset(time.time()).order_by("updated_at")[:10],
        "my runs": first_page(run_list(alice)),
        "my active runs": first_page(run_list(alice, status="active")),
        "all runs": first_page(filtered_runs({})),
        "status": first_page(filtered_runs({"status": "running"})),
        "agent": first_page(filtered_runs({"agent": "steps"})),
        "worker": filtered_runs({"worker": "host:12:"}).values("pk"),
        "children": Run.objects.filter(parent_id="a" * 32).order_by("created_at", "id"),
        "api children": first_page(run_list(alice).filter(parent_id="a" * 32)),
        "spawn key": Run.objects.filter(spawn_key="k"),
        "workers' finished rate": Run.objects.filter(finished_at__gte=timezone.now())
        .values("status").annotate(n=Count("id")).order_by(),
    }
    explained = plan(queries[name])
    assert "Seq Scan on runs_run" not in explained, explained
    assert "runs_run" in explained


def first_page(runs):
    """The query of a list's first page, newest first (operator.selectors.keyset_page)."""
    return runs.order_by("-created_at", "-pk")[:PAGE_SIZE + 1]
