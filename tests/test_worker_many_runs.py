"""One worker process holds many runs at once (threads), on a few pooled connections.

Real processes: a worker tree with one worker process, runs of an agent whose tool
sleeps (as model calls do), the connection count read from pg_stat_activity.
"""

import signal

from django.db import connection

from runs import services
from runs.models import Run, RunEvent
from tests.support.processes import TREE_DEADLINE, wait_until

POOL = 4
# The tree's main and the worker's lease keeper keep a connection each (the keeper's
# renewals must not wait behind the runs: runs/worker/leases.py); the worker's run threads
# and its claim loop share the pool.
OTHER_CONNECTIONS = 2


def launch_tickers(count: int) -> list[str]:
    # Far more steps than the test waits for: the runs are all active throughout.
    return [services.run_launch(user=None, agent="ticker",
                                inputs={"steps": 5000, "delay": 0.5}).id for _ in range(count)]


def db_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_one_process_holds_many_runs_and_hands_them_all_back(start_cluster):
    postgres = connection.vendor == "postgresql"
    count = 120 if postgres else 30
    # Whatever else is connected (this test, a Daphne of an earlier test) is not counted.
    before = db_connections() if postgres else 0
    cluster = start_cluster(workers=1, AGENTOPS_RUNS_PER_WORKER=count + 10,
                            AGENTOPS_WORKER_DB_POOL=POOL, AGENTOPS_LEASE_SECONDS=3)
    run_ids = launch_tickers(count)
    [worker] = cluster.worker_pids()
    seen = {"connections": 0}

    def all_held_and_moving():
        if postgres:
            seen["connections"] = max(seen["connections"], db_connections() - before)
        held = Run.objects.filter(pk__in=run_ids, lease_owner__contains=f":{worker}:",
                                  step_no__gte=2).count()
        return held == count

    # 120 runs (on PostgreSQL) claimed by the one process, each then two steps of 0.5 s,
    # their writes through a pool of four connections
    wait_until(all_held_and_moving, 120, interval=0.2,
               message=f"all {count} runs held by the one worker process, each past step 2")
    if postgres:
        assert seen["connections"] <= POOL + OTHER_CONNECTIONS, seen

    cluster.signal(signal.SIGTERM)  # a deploy: every held run goes back at its boundary
    cluster.proc.wait(30)
    runs = list(Run.objects.filter(pk__in=run_ids))
    assert all(r.lease_owner is None and r.status == "queued" for r in runs), \
        [(r.id, r.status, r.lease_owner) for r in runs if r.lease_owner or r.status != "queued"]
    handed_off = RunEvent.objects.filter(run_id__in=run_ids, kind="status",
                                         data__reason="shutdown").values("run_id").distinct()
    assert handed_off.count() == count
    assert not Run.objects.filter(pk__in=run_ids, claimed_after_crash=True).exists()


def test_runs_left_by_a_stopped_process_go_on_elsewhere(start_cluster):
    count = 40 if connection.vendor == "postgresql" else 20
    first = start_cluster(workers=1, name="old", AGENTOPS_RUNS_PER_WORKER=count,
                          AGENTOPS_WORKER_DB_POOL=POOL)
    run_ids = launch_tickers(count)
    [old] = first.worker_pids()
    wait_until(lambda: Run.objects.filter(pk__in=run_ids, lease_owner__contains=f":{old}:")
               .count() == count, TREE_DEADLINE, interval=0.2,
               message="the old worker holds every run")
    second = start_cluster(workers=1, name="new", AGENTOPS_RUNS_PER_WORKER=count,
                           AGENTOPS_WORKER_DB_POOL=POOL)
    [new] = second.worker_pids()
    steps_before = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "step_no"))
    first.signal(signal.SIGTERM)
    first.proc.wait(30)

    def all_moved_on():
        rows = Run.objects.filter(pk__in=run_ids, lease_owner__contains=f":{new}:")
        return sum(1 for run_id, step in rows.values_list("id", "step_no")
                   if step > steps_before[run_id]) == count

    # 40 runs (on PostgreSQL) handed back and claimed by the new process, each then a
    # step of 0.5 s, through a pool of four connections
    wait_until(all_moved_on, 90, interval=0.2, message="the new worker to carry every run on")
