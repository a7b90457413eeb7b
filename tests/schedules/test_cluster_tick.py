"""The schedules' tick runs in the worker runtime: a real worker tree (two of them, to show
that a slot is launched once) launches a schedule's runs, and they run."""

from __future__ import annotations

import pytest

import tests.workload_agents  # noqa: F401
from runs.durable import records as r
from runs.models import Run
from runs.schedules import services
from runs.schedules.models import ScheduleLaunch
from tests.support.processes import TREE_DEADLINE, wait_until

pytestmark = pytest.mark.services


def test_two_clusters_launch_an_interval_schedule_once_per_slot(users, start_cluster):
    start_cluster(workers=1, name="a")
    start_cluster(workers=1, name="b")
    schedule = services.schedule_create(user=users["alice"], data={
        "name": "every 2 s", "agent": "ticker", "inputs": {"steps": 1, "delay": 0.01},
        "kind": "interval", "interval_seconds": 2, "overlap": "allow"})
    wait_until(lambda: ScheduleLaunch.objects.filter(schedule=schedule,
                                                     outcome="launched").count() >= 3,
               TREE_DEADLINE, message="three launches")
    services.schedule_set_paused(schedule=schedule, paused=True)
    launches = list(ScheduleLaunch.objects.filter(schedule=schedule).order_by("slot_at"))
    slots = [launch.slot_at for launch in launches]
    assert len(slots) == len(set(slots))  # no slot launched twice by the two clusters
    assert all(launch.outcome == "launched" for launch in launches)
    for earlier, later in zip(slots, slots[1:]):
        assert (later - earlier).total_seconds() % 2 == 0
    run_ids = [launch.run_id for launch in launches]
    wait_until(lambda: Run.objects.filter(pk__in=run_ids, status=r.SUCCEEDED).count()
               == len(run_ids), TREE_DEADLINE, message="the scheduled runs ran")
    assert set(Run.objects.filter(pk__in=run_ids).values_list("owner_id", flat=True)) == \
        {users["alice"].pk}
