"""Child runs on real worker trees (docs/children.md): a parent fans out to 20
children, 5 at a time, while its workers are SIGKILLed; and a cancel of a parent
reaches its running children."""

import os
import signal

import pytest

from runs import services
from runs.models import Effect, Run, RunEvent
from tests.crash.helpers import (
    assert_consistent,
    assert_outside_world_clean,
    holder_pid,
    wait_final,
)
from tests.support.processes import TREE_DEADLINE, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

CHILDREN, CAP, STEPS = 20, 5, 4
KILLS = 4


def sandbox_env(server):
    return {"AGENTOPS_SANDBOX_URL": f"{server.url}/sandbox", "AGENTOPS_LEASE_SECONDS": 2}


def family(parent_id):
    return list(Run.objects.filter(parent_id=parent_id))


def ended(parent_id) -> int:
    return Run.objects.filter(parent_id=parent_id,
                              status__in=["succeeded", "failed", "cancelled"]).count()


def test_twenty_children_five_at_a_time_through_worker_kills(server, start_cluster):
    cluster = start_cluster(workers=2, **sandbox_env(server))
    parent_id = services.run_launch(user=None, agent="fan_out", inputs={
        "children": CHILDREN, "cap": CAP, "steps": STEPS}).id
    most_at_once = 0
    kills = 0
    for k in range(1, KILLS + 1):
        # Spread the kills over the fan-out: the k-th once 4k children have ended, at a
        # worker that holds a running child (and whatever else it holds).
        def held_child(k=k):
            nonlocal most_at_once
            children = family(parent_id)
            most_at_once = max(most_at_once, sum(not c.is_final for c in children))
            running = [c for c in children if c.status == "running" and c.lease_owner]
            return ended(parent_id) >= 4 * k and next(
                (pid for pid in (holder_pid(c.id) for c in running)
                 if pid in cluster.worker_pids()), None)
        pid = wait_until(held_child, TREE_DEADLINE, interval=0.02,
                         message=f"kill {k}'s moment")
        os.kill(pid, signal.SIGKILL)
        kills += 1
    assert kills >= 3
    children = family(parent_id)
    # what is left after the last kill (at 16 children ended): the last children and the
    # parent's join, on the fresh tree the kill called for
    runs = wait_final([parent_id] + [c.id for c in children], timeout=90)
    children = family(parent_id)
    child_ids = [c.id for c in sorted(children, key=lambda c: c.created_at)]
    assert len(children) == CHILDREN  # no spawn was repeated by a replay
    assert most_at_once <= CAP
    parent = Run.objects.get(pk=parent_id)
    assert parent.status == "succeeded", (parent.status, parent.error, parent.attention)
    expected = {"units": STEPS, "total": STEPS * (STEPS - 1) // 2}
    assert parent.output == {"results": [expected] * CHILDREN}
    joined = Effect.objects.get(run_id=parent_id, kind="join", superseded=False)
    assert [c["run_id"] for c in joined.result] == child_ids  # in spawn order
    spawns = Effect.objects.filter(run_id=parent_id, kind="spawn", superseded=False)
    assert sorted(e.result["run_id"] for e in spawns) == sorted(child_ids)
    for child in Run.objects.filter(pk__in=child_ids):
        assert child.status == "succeeded" and child.output == expected
        assert_consistent(child)
        endings = RunEvent.objects.filter(run_id=child.id, kind="status",
                                          data__status="succeeded").count()
        assert endings == 1, f"child {child.id} finished {endings} times"
    assert_consistent(runs[parent_id])
    per_unit = assert_outside_world_clean(child_ids)  # each unit and notification once
    assert len(per_unit) == CHILDREN * STEPS


def test_cancelling_a_parent_cancels_its_running_children(server, start_cluster):
    start_cluster(workers=2, **sandbox_env(server))
    parent_id = services.run_launch(user=None, agent="fan_out", inputs={
        "children": 8, "cap": 3, "steps": 1000, "delay": 0.05}).id
    wait_until(lambda: Run.objects.filter(parent_id=parent_id, status="running").count() == 3,
               TREE_DEADLINE, message="three running children")
    services.run_cancel(run_id=parent_id, user="op", reason="enough")
    children = wait_final([c.id for c in family(parent_id)], timeout=30)
    assert len(children) == 3  # cancelled while it waited for a slot: no fourth
    assert {c.status for c in children.values()} == {"cancelled"}
    # A parent caught running honours the cancel at its next boundary, even one it was
    # about to give up for its wait on the children (session._late_control).
    assert wait_final([parent_id], timeout=30)[parent_id].status == "cancelled"
    for child_id in children:
        assert RunEvent.objects.filter(run_id=child_id, kind="audit",
                                       data__action="cancel").exists()
