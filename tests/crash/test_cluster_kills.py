"""SIGKILL each process of a real worker tree under `manage.py worker` (the qcluster
main, sentinel, workers, pusher, monitor), alone or together, while runs are in
progress or while the cluster is idle (then launch), and SIGSTOP an idle worker (the
one holding the task queue's lock), the pusher, the sentinel and the main. Every run
must finish with the output of an uninterrupted run, nothing lost or repeated in the
outside world, the tree must be whole again with no orphan, and the heartbeat must
list exactly the live processes. On django-q2's own cluster the all-workers kill
hangs every run for good (the reincarnated workers block on a dead one's queue lock)
and the sentinel kill leaves its workers, pusher and monitor as orphans."""

import os
import signal

import psutil
import pytest

from runs.models import WorkerHeartbeat
from runs.worker.cluster import roles
from tests.crash.helpers import (
    assert_consistent,
    assert_outside_world_clean,
    holder_pid,
    wait_final,
)
from tests.crash.test_worker_crashes import expected_output, launch_steps, sandbox_env
from tests.support.processes import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

STEPS = 10
TREE = ("main", "sentinel", "worker", "pusher", "monitor")


def victims(cluster, target, run_id=None) -> list[int]:
    if target == "one_worker":
        holder = holder_pid(run_id) if run_id else None
        return [holder if holder in cluster.worker_pids() else cluster.worker_pids()[0]]
    if target == "all_workers":
        return cluster.worker_pids()
    if target == "everything":
        return [pid for role in TREE for pid in cluster.role_pids(role)]
    return cluster.role_pids(target)


def queue_lock_holder(cluster) -> int:
    """Of the idle workers, the one blocked reading the task queue's pipe (it holds the
    queue's read lock; the others wait for that lock)."""
    for pid in cluster.idle_workers():
        with open(f"/proc/{pid}/wchan") as wchan:
            if "pipe" in wchan.read():
                return pid
    return cluster.idle_workers()[0]


def assert_runs_intact(run_ids):
    runs = wait_final(run_ids, timeout=90)
    for run in runs.values():
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert run.output == expected_output(STEPS)
        assert_consistent(run)
    assert len(assert_outside_world_clean(run_ids)) == len(run_ids) * STEPS


def the_one(cluster, role) -> int | None:
    pids = cluster.role_pids(role)
    return pids[0] if len(pids) == 1 else None


def no_orphans(cluster) -> bool:
    """Every live process of the cluster hangs under its one live main and sentinel:
    none was left running with nobody watching it."""
    main, sentinel = the_one(cluster, "main"), the_one(cluster, "sentinel")
    if not (main and sentinel):
        return False
    try:
        parents = {psutil.Process(pid).ppid() for role in ("worker", "pusher", "monitor")
                   for pid in cluster.role_pids(role)}
        return psutil.Process(sentinel).ppid() == main and parents == {sentinel}
    except psutil.NoSuchProcess:  # one just ended: look again
        return False


def heartbeat_is_truthful(cluster, dead: list[int]) -> bool:
    """The live main's row lists its tree as the kernel sees it, and no row lists a
    process that is gone as alive."""
    row = WorkerHeartbeat.objects.filter(pid=the_one(cluster, "main")).first()
    if row is None:
        return False
    listed_alive = {p["pid"]: p["role"] for p in row.processes if p["alive"]}
    truth = {pid: role for role in TREE[1:] for pid in cluster.role_pids(role)}
    anywhere = {p["pid"] for r in WorkerHeartbeat.objects.all() for p in r.processes if p["alive"]}
    return listed_alive == truth and not anywhere & set(dead)


@pytest.mark.parametrize("target", ["one_worker", "all_workers", "sentinel", "monitor",
                                    "pusher", "main", "everything"])
def test_any_process_killed_loses_and_repeats_nothing(target, server, start_cluster):
    # Twice on one tree: first while runs are in progress, then, once the tree is whole
    # again, while it is idle (runs launched after the kill): the healed tree must heal
    # again.
    cluster = start_cluster(workers=2, supervised=True, **sandbox_env(server))
    wait_until(cluster.tree_ready, 30, message="a whole, idle worker tree")
    for phase in ("mid_run", "idle"):
        run_ids = launch_steps(2, steps=STEPS, delay=0.1) if phase == "mid_run" else []
        if run_ids:
            wait_until(lambda ids=run_ids: holder_pid(ids[0]) in cluster.worker_pids(), 20,
                       message="a worker to hold the run")
        killed = victims(cluster, target, run_ids[0] if run_ids else None)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        run_ids = run_ids or launch_steps(2, steps=STEPS, delay=0.05)
        assert_runs_intact(run_ids)
        wait_until(lambda: cluster.tree_ready() and no_orphans(cluster), 20,
                   message=f"the tree to be whole again, with no orphan ({phase})")
        wait_until(lambda dead=killed: heartbeat_is_truthful(cluster, dead), 10,
                   message=f"a heartbeat that matches the processes ({phase})")


@pytest.mark.parametrize("role", ["worker", "pusher", "sentinel", "main"])
def test_a_frozen_process_does_not_stall_the_cluster(role, server, start_cluster):
    # SIGSTOP kills nothing the parent could see: the watchdog (worker, pusher), the
    # main's check of its sentinel and the supervisor's check of the main end it.
    # A main frozen while it starts (one that replaced a main whose loop a loaded
    # machine slowed past the 5 s) is ended after the start allowance instead: 20 s here.
    cluster = start_cluster(workers=2, supervised=True, AGENTOPS_MAIN_STALE=5,
                            AGENTOPS_MAIN_START_TIMEOUT=20, **sandbox_env(server))
    wait_until(cluster.tree_ready, 30, message="a whole, idle worker tree")
    # The main beats (and reports to the supervisor) once per tick of its loop, which
    # starts just after the tree does: frozen before that, it counts as a main that
    # never got going (the start allowance), not as a frozen one (the stale limit).
    wait_until(lambda: WorkerHeartbeat.objects.filter(pid=the_one(cluster, "main")).exists(),
               30, message="the main's first beat")
    [frozen] = [queue_lock_holder(cluster)] if role == "worker" else cluster.role_pids(role)
    os.kill(frozen, signal.SIGSTOP)
    try:
        run_ids = launch_steps(2, steps=STEPS, delay=0.05)
        assert_runs_intact(run_ids)
        wait_until(lambda: not roles.is_alive(frozen), 30, message="the frozen process to be ended")
    finally:
        if roles.is_alive(frozen):
            os.kill(frozen, signal.SIGCONT)
    wait_until(lambda: heartbeat_is_truthful(cluster, [frozen]), 10,
               message="a heartbeat that matches the processes")
