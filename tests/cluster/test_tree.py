"""The worker tree alone (runs/worker/tree.py), with no restart loop around it: crash-only
supervision. Damage (a worker that dies, a worker or the main stopped) ends
`manage.py worker` with a non-zero exit once the other workers have handed their runs
back; a stop signal is a deploy (the heartbeat says `stopping` first, the runs go back,
exit 0); nothing outlives its main, nor the grace."""

import os
import signal

import pytest

from runs import services
from runs.models import Run, RunEvent, WorkerHeartbeat
from tests.crash.helpers import holder_pid
from tests.support.processes import NO_TIME_SLICES, is_running, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def launch(delay: float = 0.05) -> str:
    return services.run_launch(user=None, agent="ticker",
                               inputs={"steps": 5000, "delay": delay}).id


def held_by_the_tree(cluster, run_id: str) -> int:
    return wait_until(lambda: holder_pid(run_id) in cluster.tree_workers() and
                      Run.objects.get(pk=run_id).step_no >= 2 and holder_pid(run_id), 30,
                      message="a worker of the tree to hold the run, two steps in")


def handed_back(run_id: str) -> bool:
    """Released by its worker at an effect boundary (not taken from a dead one)."""
    run = Run.objects.get(pk=run_id)
    return run.lease_owner is None and run.status == "queued" and RunEvent.objects.filter(
        run_id=run_id, kind="status", data__reason="shutdown").exists()


def due_now(run_id: str) -> bool:
    """Free for any tree to claim: handed back, or its dead holder's lease expired."""
    from django.utils import timezone

    run = Run.objects.get(pk=run_id)
    return run.lease_owner is None or run.lease_expires_at <= timezone.now()


def test_a_worker_that_dies_ends_the_tree_after_the_others_hand_their_runs_back(start_cluster):
    cluster = start_cluster(workers=2, restart=False, **NO_TIME_SLICES)
    run_id = launch()
    holder = held_by_the_tree(cluster, run_id)
    [other] = [pid for pid in cluster.tree_workers() if pid != holder]
    os.kill(other, signal.SIGKILL)
    assert cluster.proc.wait(30) == 1
    assert handed_back(run_id)
    assert not is_running(holder)
    assert "worker tree damaged" in cluster.output()


def test_a_stopped_worker_is_killed_and_its_runs_are_free_at_once(start_cluster):
    cluster = start_cluster(workers=2, restart=False, AGENTOPS_LEASE_SECONDS=600,
                            **NO_TIME_SLICES)
    run_id = launch()
    holder = held_by_the_tree(cluster, run_id)
    os.kill(holder, signal.SIGSTOP)
    try:
        assert cluster.proc.wait(30) == 1
        assert not is_running(holder)
        # Not after its 600 s lease: the dying main expired the killed worker's leases.
        assert due_now(run_id)
        assert "stopped for over" in cluster.output()
    finally:
        if is_running(holder):
            os.kill(holder, signal.SIGCONT)


def test_a_stopped_main_is_killed_by_its_workers_which_hand_their_runs_back(start_cluster):
    cluster = start_cluster(workers=2, restart=False, **NO_TIME_SLICES)
    run_id = launch()
    held_by_the_tree(cluster, run_id)
    workers = cluster.tree_workers()
    os.kill(cluster.pid, signal.SIGSTOP)
    assert cluster.proc.wait(30) == -signal.SIGKILL
    wait_until(lambda: not any(map(is_running, workers)), 30,
               message="the workers to end with their main")
    assert handed_back(run_id)


def test_a_killed_main_takes_its_workers_with_it_and_they_hand_their_runs_back(start_cluster):
    cluster = start_cluster(workers=2, restart=False, **NO_TIME_SLICES)
    run_id = launch()
    held_by_the_tree(cluster, run_id)
    workers = cluster.tree_workers()
    os.kill(cluster.pid, signal.SIGKILL)
    wait_until(lambda: not any(map(is_running, workers)), 30,
               message="the workers to end with their main (the kernel's death signal)")
    assert handed_back(run_id)


@pytest.mark.parametrize("sig,whom", [(signal.SIGTERM, "main"), (signal.SIGTERM, "group"),
                                      (signal.SIGINT, "group")])
def test_a_stop_signal_says_stopping_hands_the_runs_back_and_exits_0(sig, whom, start_cluster):
    """SIGTERM to the main (a deploy under systemd's KillMode=mixed), to the whole group
    (KillMode=control-group, Kubernetes), SIGINT to the group (Ctrl-C under bin/serve)."""
    cluster = start_cluster(workers=2, restart=False, **NO_TIME_SLICES)
    run_id = launch()
    held_by_the_tree(cluster, run_id)
    main = cluster.pid
    (cluster.signal if whom == "main" else cluster.signal_group)(sig)
    assert cluster.proc.wait(30) == 0
    assert handed_back(run_id)
    beat = WorkerHeartbeat.objects.get(pid=main)
    assert beat.stopping
    if whom == "main":  # it said so before its workers let their runs go
        handoff = RunEvent.objects.get(run_id=run_id, kind="status", data__reason="shutdown")
        assert beat.last_seen <= handoff.created_at


def stuck_in_a_call(cluster, faults_dir) -> tuple[str, int]:
    """A run whose worker is inside a call that takes a minute (past its effect boundary:
    a stop cannot hand it back before the call returns)."""
    (faults_dir / "before_effect").write_text("sleep:60@pause_for")
    run_id = launch()
    wait_until(lambda: list(faults_dir.glob("before_effect.fired.*")), 30,
               message="a worker to be inside the call")
    [worker] = cluster.tree_workers()
    assert holder_pid(run_id) == worker
    return run_id, worker


def test_a_run_stuck_in_a_call_is_cut_after_the_grace(start_cluster, faults_dir):
    """The stop does not wait for the call: the worker is killed after the grace, and its
    lease expires at once for another tree to take the run over."""
    cluster = start_cluster(workers=1, restart=False, AGENTOPS_SHUTDOWN_GRACE=1,
                            AGENTOPS_LEASE_SECONDS=600, **NO_TIME_SLICES)
    run_id, worker = stuck_in_a_call(cluster, faults_dir)
    cluster.signal(signal.SIGTERM)
    assert cluster.proc.wait(30) == 0
    assert not is_running(worker)
    assert not handed_back(run_id)
    assert due_now(run_id)


def test_a_worker_whose_main_died_does_not_outlive_the_grace(start_cluster, faults_dir):
    cluster = start_cluster(workers=1, restart=False, AGENTOPS_SHUTDOWN_GRACE=1, **NO_TIME_SLICES)
    run_id, worker = stuck_in_a_call(cluster, faults_dir)
    os.kill(cluster.pid, signal.SIGKILL)
    wait_until(lambda: not is_running(worker), 30,
               message="the orphan to end by itself after the grace (the call takes 60 s)")
    assert not handed_back(run_id)
