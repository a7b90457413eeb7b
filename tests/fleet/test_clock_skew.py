"""Clock skew: every lease and timer decision of a worker tree is made on the database's
clock (runs/storage/clock.py, installed as the engine's by `manage.py worker`), so
hosts whose clocks disagree still agree on them.

On two hosts whose wall clocks are an hour ahead and an hour behind (a sitecustomize
moves time.time() in each host's processes: tests/support/skewed_clock), runs that
sleep on durable timers between their units move from host to host: no run is taken
from a live worker (on its own clock the host ahead would find every lease run out,
and the host behind would write leases already out), no timer fires early (a timer set
by the host behind would be due at once) or an hour late (one set by the host ahead),
and each host's heartbeat is on the database's clock (the Workers page, and which agent
code is live, compare it with now)."""

from datetime import timedelta

import pytest
from django.db import connection

from runs.durable import effect
from runs.models import Effect, WorkerHeartbeat
from tests.fleet.checks import assert_each_unit_once, writers
from tests.support.processes import ROOT

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

HOUR = 3600.0
# Leases of 30 s, not the fleet's 2: a live worker starved of CPU for 2 s on a loaded
# machine lost its lease (CI: "lease lost to a newer owner"), which this test must tell
# apart from a skew. An hour's skew still dwarfs the lease: on its own clock, the host
# ahead would find every lease 3,570 s out, and the host behind would write them out.
LEASE_SECONDS = 30
STEPS = 4
SLEEP = 1.5  # past INLINE_SLEEP_SECONDS: a durable timer, the run gives its worker up
# One run at a time per host (each host's tree has one worker): four runs are more than
# one host holds, so both hosts' clocks take part. With four a worker, one host could
# hold every run and take each back at its timer before the other polled (CI, loaded:
# every unit written by one host).
RUNS_PER_WORKER = 1
SKEWED = ROOT / "tests" / "support" / "skewed_clock"


def database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def timers_kept(run_id: str) -> list[tuple]:
    """(step, wake time, when the next step began) of each of the run's timers, in the
    database's times as the hosts wrote them."""
    effects = {(e.step_no, e.seq): e for e in Effect.objects.filter(run_id=run_id)}
    kept = []
    for (step, _), sleep in sorted(effects.items()):
        if sleep.kind == effect.SLEEP:
            woke = effects[(step + 1, 0)].started_at  # the next step's first call
            kept.append((step, sleep.result["wake_at"], woke.timestamp()))
    return kept


def test_hosts_an_hour_apart_agree_on_leases_and_timers(fleet):
    fleet = fleet(hosts=2)
    ahead, behind = fleet.hosts
    trees = fleet.start_all({ahead.hostname: {"AGENTOPS_TEST_CLOCK_SKEW": HOUR},
                             behind.hostname: {"AGENTOPS_TEST_CLOCK_SKEW": -HOUR}},
                            AGENTOPS_RUNS_PER_WORKER=RUNS_PER_WORKER,
                            AGENTOPS_LEASE_SECONDS=LEASE_SECONDS,
                            PYTHONPATH=f"{SKEWED}:{ROOT}")
    run_ids = fleet.launch(4, steps=STEPS, delay=0.1, sleep=SLEEP)
    # four runs of four units with 1.5 s timers between them, moving from host to host
    assert_each_unit_once(run_ids, STEPS, timeout=60)
    for tree in trees.values():  # no run was taken from a live worker
        assert "lease lost" not in tree.output() and "fenced off" not in tree.output()
    for run_id in run_ids:
        timers = timers_kept(run_id)
        assert len(timers) == STEPS - 1
        for step, wake_at, woke in timers:
            assert woke >= wake_at, f"run {run_id}: the timer of step {step} fired early"
    # The runs did move between the hosts (a timer frees the worker): both clocks took part.
    assert set().union(*(writers(run_id) for run_id in run_ids)) == \
        {host.hostname for host in fleet.hosts}
    now = database_now()
    for hostname, tree in trees.items():
        seen = WorkerHeartbeat.objects.get(host=hostname, pid=tree.pid).last_seen
        assert abs(seen - now) < timedelta(minutes=1), (hostname, seen, now)
