"""Crash tests with real worker trees (`manage.py worker` under a restart loop, as a
service manager runs it): kill workers at chosen and random instants, then check that
every run finished with the output of an uninterrupted run, and that nothing reached
the outside world twice."""

import os
import random
import signal
import time

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


def launch_steps(n_runs, steps=12, delay=0.05, notify=True):
    return [services.run_launch(user=None, agent="steps",
                                inputs={"steps": steps, "delay": delay, "notify": notify}).id
            for _ in range(n_runs)]


def expected_output(steps):
    return {"units": steps, "total": steps * (steps - 1) // 2}


def sandbox_env(server):
    return {"AGENTOPS_SANDBOX_URL": f"{server.url}/sandbox"}


def test_sigkill_at_random_effect_boundaries(server, start_cluster):
    rng = random.Random(int(os.environ.get("CRASH_SEED", "7")))
    cluster = start_cluster(workers=2, **sandbox_env(server))
    run_ids = launch_steps(3, steps=25)
    kills = 0
    # Six kills 0.2-0.8 s apart, each only while a run is running on a live worker: after
    # a kill the restart loop's fresh tree (a new Python: tens of seconds on CI) claims them.
    deadline = time.monotonic() + 90
    while kills < 6 and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.8))
        running = [r for r in Run.objects.filter(pk__in=run_ids, status="running")]
        if not running:
            # A worker process holds all three runs, so each kill crashes them all: three
            # kills in one step stop them at the crash-loop guard (wait_final resumes them).
            if all(r.is_final or r.status == "needs_attention"
                   for r in Run.objects.filter(pk__in=run_ids)):
                break
            continue
        pid = holder_pid(rng.choice(running).id)
        if pid in cluster.worker_pids():
            os.kill(pid, signal.SIGKILL)
            kills += 1
    assert kills >= 3, "the runs finished before the test could kill their workers"
    runs = wait_final(run_ids)
    for run in runs.values():
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert run.output == expected_output(25)
        assert_consistent(run)
    per_unit = assert_outside_world_clean(run_ids)
    assert len(per_unit) == 3 * 25  # every unit of work arrived, once


@pytest.mark.parametrize("point,spec", [
    ("after_effect_before_log", "kill@post_record"),
    ("before_effect", "kill@post_record"),
    ("after_checkpoint_before_event", "kill"),
    ("after_checkpoint", "kill"),
    ("lease_renewal", "kill"),
])
def test_sigkill_at_named_fault_point(point, spec, server, start_cluster, faults_dir):
    start_cluster(workers=2, AGENTOPS_LEASE_SECONDS=2, **sandbox_env(server))
    [run_id] = launch_steps(1, steps=8, delay=0.3 if point == "lease_renewal" else 0.05)
    wait_until(lambda: Run.objects.get(pk=run_id).step_no >= 2, 30, message="two steps")
    (faults_dir / point).write_text(spec)
    wait_until(lambda: list(faults_dir.glob(f"{point}.fired.*")), 30, message=f"{point} to fire")
    runs = wait_final([run_id])
    run = runs[run_id]
    assert run.status == "succeeded", (run.status, run.error, run.attention)
    assert run.output == expected_output(8)
    assert Run.objects.get(pk=run_id).crash_count == 0
    assert_consistent(run)
    assert len(assert_outside_world_clean([run_id])) == 8
    if point == "after_effect_before_log":
        # the idempotent call was made again, with the same key, and the target deduplicated
        from sandbox.models import KeyCall
        assert KeyCall.objects.filter(key__startswith=run_id, calls__gt=1).exists()


def test_in_doubt_notification_goes_to_an_operator(server, start_cluster, faults_dir):
    start_cluster(workers=1, **sandbox_env(server))
    (faults_dir / "after_effect_before_log").write_text("kill@send_notification")
    [run_id] = launch_steps(1, steps=3)
    wait_until(lambda: Run.objects.get(pk=run_id).status == "needs_attention", TREE_DEADLINE,
               message="the in-doubt effect to surface")
    run = Run.objects.get(pk=run_id)
    assert run.attention["kind"] == "in_doubt"
    assert run.attention["tool"].endswith("send_notification")
    from sandbox.models import Notification
    assert Notification.objects.filter(unit=f"{run_id}-done").count() == 1  # it did happen
    services.run_resolve_effect(run_id=run_id, seq=run.attention["seq"], resolution="done",
                                result={"count": 1}, user="ops", reason="seen downstream")
    run = wait_final([run_id], resolve_in_doubt=False)[run_id]
    assert run.status == "succeeded"
    assert Notification.objects.filter(unit=f"{run_id}-done").count() == 1
    assert run.audit_entries.filter(action="resolve", actor="ops").count() == 1


@pytest.mark.parametrize("target", ["main", "group"])
def test_sigterm_hands_off_without_waiting_for_the_lease(target, server, start_cluster):
    env = dict(sandbox_env(server), AGENTOPS_LEASE_SECONDS=30)  # a lease wait would show
    first = start_cluster(workers=1, name="old", **env)
    [run_id] = launch_steps(1, steps=40, delay=0.1)
    wait_until(lambda: holder_pid(run_id) in first.worker_pids(), 30, message="old cluster owns it")
    # The new tree's main ticks as it starts, then not for a minute: the handed-back run
    # reaches the new tree by its free slot's poll, not by anything of its main.
    second = start_cluster(workers=1, name="new", AGENTOPS_SWEEP_INTERVAL=60, **env)
    (first.signal_group if target == "group" else first.signal)(signal.SIGTERM)
    wait_until(lambda: holder_pid(run_id) in second.worker_pids(), 15,
               message="the new cluster to take the run")
    first.proc.wait(20)
    run = wait_final([run_id])[run_id]
    assert run.status == "succeeded" and run.output == expected_output(40)
    # Handed back by the old worker: at the shutdown, or by the end of a time slice that
    # came first (a loaded machine once had the slice end just as SIGTERM arrived);
    # never taken from a dead worker (claimed_after_crash).
    handoffs = RunEvent.objects.filter(run_id=run_id, kind="status",
                                       data__reason__in=["shutdown", "slice"])
    assert handoffs.count() >= 1
    assert not Run.objects.get(pk=run_id).claimed_after_crash
    assert_consistent(run)
    assert len(assert_outside_world_clean([run_id])) == 40


def test_sigterm_is_not_held_until_the_next_sweep(start_cluster):
    """The main sleeps between ticks: a stop signal must cut that sleep short."""
    cluster = start_cluster(workers=1, AGENTOPS_SWEEP_INTERVAL=60)
    wait_until(cluster.tree_ready, 30, message="the cluster up and idle")
    cluster.signal(signal.SIGTERM)
    cluster.proc.wait(15)  # far below the 60 s sweep interval it slept out before


def test_sigstop_zombie_writes_are_refused(server, start_cluster):
    env = dict(sandbox_env(server), AGENTOPS_LEASE_SECONDS=2)
    first = start_cluster(workers=1, name="a", **env)
    [run_id] = launch_steps(1, steps=30, delay=0.2)
    wait_until(lambda: holder_pid(run_id) in first.worker_pids(), 30, message="a owns it")
    wait_until(lambda: Run.objects.get(pk=run_id).step_no >= 3, 30, message="three steps")
    zombie = Run.objects.get(pk=run_id).lease_owner
    # The whole tree: a worker stopped alone is killed by its main (runs/worker/tree.py),
    # a tree stopped whole (a host frozen, a VM paused) has nobody to notice.
    first.signal_group(signal.SIGSTOP)
    stopped_at_epoch = Run.objects.get(pk=run_id).epoch
    try:
        second = start_cluster(workers=1, name="b", **env)
        wait_until(lambda: holder_pid(run_id) in second.worker_pids(), 30,
                   message="b to take over after the lease expired")
        taken_over_epoch = Run.objects.get(pk=run_id).epoch
        assert taken_over_epoch > stopped_at_epoch
    finally:
        first.signal_group(signal.SIGCONT)
    run = wait_final([run_id])[run_id]
    assert run.status == "succeeded" and run.output == expected_output(30)
    zombie_epoch = stopped_at_epoch
    takeover = min((e for e in RunEvent.objects.filter(run_id=run_id, kind="status")
                    if e.data.get("epoch", 0) > zombie_epoch), key=lambda e: e.seq)
    # The zombie wrote effects before it froze: at this claim's epoch or, if the frozen
    # process had just claimed the run again (a time slice), at an earlier one.
    assert Effect.objects.filter(run_id=run_id, epoch__lte=zombie_epoch, worker=zombie).exists()
    late = Effect.objects.filter(run_id=run_id, epoch__lte=zombie_epoch,
                                 finished_at__gt=takeover.created_at)
    assert not late.exists(), "a write from a fenced epoch landed after the take-over"
    assert_consistent(run)
    assert len(assert_outside_world_clean([run_id])) == 30


def test_crash_loop_guard_stops_a_run_that_kills_its_worker(start_cluster):
    start_cluster(workers=1)
    run = services.run_launch(user=None, agent="crasher", inputs={})
    wait_until(lambda: Run.objects.get(pk=run.id).status == "needs_attention", TREE_DEADLINE,
               message="the crash-loop guard")
    run.refresh_from_db()
    assert run.attention["kind"] == "crash_loop"
    assert run.step_no == 1


def test_twenty_runs_share_four_workers(start_cluster):
    # Eight slots for twenty runs: runs claimed while nobody waited give way as soon
    # as runs wait, so every run progresses before the first ends.
    start_cluster(workers=4, AGENTOPS_TIME_SLICE=0.3, AGENTOPS_RUNS_PER_WORKER=2)
    run_ids = [services.run_launch(user=None, agent="ticker", inputs={"steps": 20, "delay": 0.05}).id
               for _ in range(20)]

    def first_finished():
        return Run.objects.filter(pk__in=run_ids, status="succeeded").exists()

    # none ends before all twenty have had turns: 20 steps each, handed back every 0.3 s
    wait_until(first_finished, 120, message="a first run to finish")
    started = Run.objects.filter(pk__in=run_ids, step_no__gt=0).count()
    assert started == 20, f"only {started} of 20 runs had progressed when the first finished"
    # 400 steps of 0.05 s on eight slots, each run handed back at every 0.3 s slice and
    # claimed again, on a tree sharing CI's two cores
    runs = wait_final(run_ids, timeout=180)
    assert all(r.status == "succeeded" and r.output == {"ticks": 20} for r in runs.values())
