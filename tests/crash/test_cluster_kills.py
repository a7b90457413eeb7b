"""SIGKILL each process of a real worker tree (`manage.py worker` under a restart loop, as
systemd or bin/serve runs it): a worker, every worker, the main, everything at once,
while runs are in progress and while the tree is idle (then launch); and SIGSTOP a
worker, every worker, the main. Crash-only: each of these ends the tree, the restart
loop starts a fresh one. Every run must finish with the output of an uninterrupted run,
nothing lost or repeated in the outside world, the tree must be whole again with no
process of the old one left, and the heartbeat must list exactly the live processes."""

import os
import signal

import psutil
import pytest

from runs.models import WorkerHeartbeat
from runs.worker import roles
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


def victims(cluster, target, run_id=None) -> list[int]:
    workers = cluster.tree_workers()
    if target == "one_worker":
        holder = holder_pid(run_id) if run_id else None
        return [holder if holder in workers else workers[0]]
    if target == "all_workers":
        return workers
    if target == "main":
        return [cluster.pid]
    return [cluster.pid, *workers]  # everything


def assert_runs_intact(run_ids):
    # two runs of ten steps through the kill: a fresh tree (the kill ends the old one),
    # its claims, the steps left
    runs = wait_final(run_ids, timeout=90)
    for run in runs.values():
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert run.output == expected_output(STEPS)
        assert_consistent(run)
    assert len(assert_outside_world_clean(run_ids)) == len(run_ids) * STEPS


def no_orphans(cluster) -> bool:
    """Every live process of the cluster hangs under its one live main: none was left
    running with nobody watching it."""
    try:
        return cluster.tree_ready() and all(
            psutil.Process(pid).ppid() == cluster.pid for pid in cluster.worker_pids())
    except psutil.NoSuchProcess:  # one just ended: look again
        return False


def heartbeat_is_truthful(cluster, dead: list[int]) -> bool:
    """The live main's row lists its tree as the kernel sees it, and no row lists a
    process that is gone as alive."""
    row = WorkerHeartbeat.objects.filter(pid=cluster.pid).first()
    if row is None:
        return False
    listed_alive = {p["pid"]: p["role"] for p in row.processes if p["alive"]}
    truth = {pid: "worker" for pid in cluster.tree_workers()}
    anywhere = {p["pid"] for r in WorkerHeartbeat.objects.all() for p in r.processes if p["alive"]}
    return listed_alive == truth and not anywhere & set(dead)


@pytest.mark.parametrize("target", ["one_worker", "all_workers", "main", "everything"])
def test_any_process_killed_loses_and_repeats_nothing(target, server, start_cluster):
    # Twice on one cluster: first while runs are in progress, then, once a fresh tree is
    # whole, while it is idle (runs launched after the kill): the fresh tree must heal too.
    cluster = start_cluster(workers=2, **sandbox_env(server))
    wait_until(cluster.tree_ready, 30, message="a whole, idle worker tree")
    for phase in ("mid_run", "idle"):
        run_ids = launch_steps(2, steps=STEPS, delay=0.1) if phase == "mid_run" else []
        if run_ids:
            wait_until(lambda ids=run_ids: holder_pid(ids[0]) in cluster.tree_workers(), 20,
                       message="a worker to hold the run")
        killed = victims(cluster, target, run_ids[0] if run_ids else None)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        run_ids = run_ids or launch_steps(2, steps=STEPS, delay=0.05)
        assert_runs_intact(run_ids)
        wait_until(lambda: no_orphans(cluster), 20,
                   message=f"a fresh tree, whole, with nothing of the old one ({phase})")
        wait_until(lambda dead=killed: heartbeat_is_truthful(cluster, dead), 10,
                   message=f"a heartbeat that matches the processes ({phase})")


@pytest.mark.parametrize("target", ["one_worker", "all_workers", "main"])
def test_a_frozen_process_does_not_stall_the_runs(target, server, start_cluster):
    # SIGSTOP kills nothing: a worker stopped for AGENTOPS_STOPPED_SECONDS is damage its
    # main sees (psutil's status), a stopped main its workers see; either way the tree
    # ends and a fresh one takes the runs.
    cluster = start_cluster(workers=2, **sandbox_env(server))
    wait_until(cluster.tree_ready, 30, message="a whole, idle worker tree")
    run_ids = launch_steps(2, steps=STEPS, delay=0.1)
    wait_until(lambda: holder_pid(run_ids[0]) in cluster.tree_workers(), 20,
               message="a worker to hold the run")
    frozen = victims(cluster, target, run_ids[0])
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        assert_runs_intact(run_ids)
        wait_until(lambda: not any(map(roles.is_alive, frozen)), 30,
                   message="the frozen processes to be ended")
    finally:
        for pid in frozen:
            if roles.is_alive(pid):
                os.kill(pid, signal.SIGCONT)
    wait_until(lambda: no_orphans(cluster), 20, message="a fresh tree, whole")
    wait_until(lambda: heartbeat_is_truthful(cluster, frozen), 10,
               message="a heartbeat that matches the processes")
