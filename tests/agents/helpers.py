"""Driving the built-in agents on real workers: launch, kill, resolve, check downstream."""

import os
import signal
from collections import Counter

from runs import services
from runs.models import Run, RunEvent
from sandbox.models import KeyCall, Notification, Record
from tests.crash.helpers import assert_consistent, holder_pid
from tests.support.processes import NO_TIME_SLICES, RUNS_END_DEADLINE, TREE_DEADLINE, wait_until

FINAL = ("succeeded", "failed", "cancelled")


def cluster_env(server, **extra) -> dict:
    # A short lease: a killed worker's run is taken over within seconds.
    return {"AGENTOPS_SANDBOX_URL": f"{server.url}/sandbox", "AGENTOPS_LEASE_SECONDS": 2,
            **extra}


# A worker process may run several runs in threads (PostgreSQL). A test that kills one
# run's worker while an uninterrupted run goes on beside it gives each its own process,
# and a lease long enough that no load on the machine takes the uninterrupted run over
# (CI saw a 2 s lease lost at a load of 25); the killed one's is expired at once by the
# sweep, which sees its worker's process gone (AGENTOPS_DETECT_DEAD_LOCAL_WORKERS).
# Time slices as long: a run that yielded at a slice's end could be claimed next by the
# other run's process, between the moment a test reads the victim's holder and the kill.
# And a long grace: each kill ends the worker tree, whose other worker hands the
# uninterrupted run back at its next effect boundary (runs/worker/tree.py); on a loaded
# machine that took longer than the default 20 s once, and the SIGKILL after it made
# the uninterrupted run resume "after a crash" (CI saw both, PostgreSQL).
ONE_RUN_PER_WORKER = {"AGENTOPS_RUNS_PER_WORKER": 1, "AGENTOPS_LEASE_SECONDS": 30,
                      **NO_TIME_SLICES, "AGENTOPS_SHUTDOWN_GRACE": 120}


def launch(agent: str, inputs: dict) -> str:
    return services.run_launch(user=None, agent=agent, inputs=inputs).id


def kill_holder(run_id: str, cluster, milestones, timeout: float = TREE_DEADLINE) -> list[int]:
    """SIGKILL the worker that holds the run, once per milestone.

    Each milestone is a predicate on the Run row; the next kill waits until a new
    worker has taken the run over and the milestone is reached, so every kill
    lands mid-run, in a different stretch of it.
    """
    killed = []
    for number, reached in enumerate(milestones, start=1):
        def victim(number=number, reached=reached):
            run = Run.objects.get(pk=run_id)
            assert run.status not in FINAL, f"the run ended ({run.status}) before kill {number}"
            pid = holder_pid(run_id)
            if (run.status == "running" and pid and pid not in killed
                    and pid in cluster.worker_pids() and reached(run)):
                return pid
            return None

        try:
            pid = wait_until(victim, timeout, interval=0.02, message=f"kill {number}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the run: {describe(run_id)}") from None
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return killed


def wait_final(run_ids, timeout: float = RUNS_END_DEADLINE, in_doubt_unit=None) -> dict:
    """Wait for every run to end. An in-doubt effect is resolved as an operator would:
    look downstream for the notification (``in_doubt_unit(run_id)``), then say "done"
    (with what arrived) if it is there, "retry" if it is not."""

    def all_final():
        for run in Run.objects.filter(pk__in=run_ids, status="needs_attention"):
            attention = run.attention or {}
            assert attention.get("kind") == "in_doubt" and in_doubt_unit, \
                f"run {run.id} needs attention: {attention}"
            arrived = Notification.objects.filter(unit=in_doubt_unit(run.id)).first()
            services.run_resolve_effect(
                run_id=run.id, seq=attention["seq"], user="test-operator",
                resolution="done" if arrived else "retry",
                result={"id": arrived.pk, "count": 1} if arrived else None,
                reason="looked downstream")
        runs = Run.objects.filter(pk__in=run_ids)
        return len(runs) == len(run_ids) and all(r.status in FINAL for r in runs)

    try:
        wait_until(all_final, timeout, interval=0.1, message="the runs to end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; " + "; ".join(describe(i) for i in run_ids)) from None
    runs = {r.id: r for r in Run.objects.filter(pk__in=run_ids)}
    for run in runs.values():
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert_consistent(run)
    return runs


def describe(run_id: str) -> str:
    run = Run.objects.get(pk=run_id)
    return (f"{run_id} {run.status} step {run.step_no} progress {run.progress_done}/"
            f"{run.progress_total} owner {run.lease_owner} attention {run.attention}")


def assert_nothing_reached_the_target_twice(run_id: str) -> Counter:
    """No unit of work recorded twice, no key reused for other work, no notification
    repeated. Returns the records per unit."""
    per_unit = Counter(Record.objects.filter(unit__startswith=f"{run_id}-")
                       .values_list("unit", flat=True))
    assert max(per_unit.values(), default=1) == 1, \
        f"a unit reached the target twice: {[u for u, n in per_unit.items() if n > 1]}"
    keys = KeyCall.objects.filter(key__startswith=f"{run_id}:")
    assert not keys.filter(mismatches__gt=0).exists(), "a key was reused for other work"
    notified = Counter(Notification.objects.filter(unit__startswith=f"{run_id}-")
                       .values_list("unit", flat=True))
    assert max(notified.values(), default=1) == 1, f"a notification was repeated: {notified}"
    return per_unit


def resumes_after_a_crash(run_id: str) -> int:
    """How often the run was taken over from a dead worker."""
    return RunEvent.objects.filter(run_id=run_id, kind="status", data__after="crash").count()


def killed_runs_resumed(run_id: str, kills: int) -> None:
    crashes = resumes_after_a_crash(run_id)
    assert crashes >= kills, f"{crashes} resumes after a crash, expected {kills}"
