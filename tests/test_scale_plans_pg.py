"""The plans of the reads that must stay fast at a year of history (bench/scale.py,
docs/scaling.md), on a small table whose statistics look like a large one's: a run of
many events, few of them status events. PostgreSQL only."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Effect, Run, RunEvent
from runs.operator.selectors import run_detail
from runs.selectors import run_trouble_events

# PostgreSQL's own plans: collected on PostgreSQL only (tests/conftest.py). Outside a
# transaction, so that VACUUM ANALYZE can give the planner the table as it is: the dead
# rows earlier tests of the same database left behind (emptied by DELETE) made it choose
# another index in one CI run.
pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 5000
# The long run's events are a small share of the table, as at scale (a run of 1,000,000
# events among 50,000,000): at a quarter of it, the planner took a quarter of every run's
# status events for this run's and chose the webhooks' index in two CI runs.
LONG_RUN_EVENTS = 2000
OTHER_RUNS = 10000


def other_runs() -> None:
    """Runs of a few events each, two of them status events, as most runs are."""
    runs = Run.objects.bulk_create(Run(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                                       status="succeeded", event_seq=3)
                                   for _ in range(OTHER_RUNS))
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=seq, kind="log" if seq == 2 else "status",
                 data={"status": "succeeded"}) for run in runs for seq in (1, 2, 3))


def a_long_run() -> Run:
    run = Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                             status="succeeded", event_seq=LONG_RUN_EVENTS)
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=seq, kind="status" if seq % 400 == 0 else "log",
                 data={"status": "failed"} if seq % 400 == 0 else {"message": "x"})
        for seq in range(1, LONG_RUN_EVENTS + 1))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_runevent")
    return run


def test_a_runs_failures_are_read_from_its_status_events_only():
    other_runs()
    run = a_long_run()
    assert [e.seq for e in run_trouble_events(run)] == [400, 800, 1200, 1600, 2000]
    query = (RunEvent.objects.filter(run=run, kind="status")
             .filter(data__status="failed").order_by("seq"))
    plan = query.explain(analyze=True)
    # the partial index of the run's status events: neither its 2,000 events by (run,
    # seq) nor every run's status events by the webhooks' index
    assert "event_run_status" in plan, plan


def test_the_operators_run_page_reads_a_large_runs_effects_by_its_run():
    """The run's latest effects: through its own rows (run_id first), not every run's
    effects by the primary key backwards, which the planner chose for a run holding
    most of the effects (it expects to meet them soon; they were inserted early)."""
    run = Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                             status="succeeded")
    effects = [Effect(run=run, branch=1, step_no=n, seq=0, kind="call", tool="t",
                      digest="d", key=f"{run.pk}:1:{n}:0", status="done")
               for n in range(EVENTS)]
    others = Run.objects.bulk_create(Run(id=uuid.uuid4().hex, agent="ticker",
                                         agent_version="1", status="succeeded")
                                     for _ in range(OTHER_RUNS))
    effects += [Effect(run=other, branch=1, step_no=0, seq=0, kind="call", tool="t",
                       digest="d", key=f"{other.pk}:1:0:0", status="done") for other in others]
    Effect.objects.bulk_create(effects)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_effect")
    with CaptureQueriesContext(connection) as captured:
        run_detail(run)
    query = next(q["sql"] for q in captured.captured_queries
                 if q["sql"].startswith('SELECT "runs_effect"'))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "runs_effect_pkey" not in plan, plan
