"""A partition: a worker host's link goes down while its worker is inside a tool call,
for longer than the lease. Nothing on the host notices (its connections stay open, what
it sends is lost); the other hosts take its runs over once their leases run out, and
the operator's Workers page shows the host without a heartbeat. Then
the link comes back, TCP delivers what the cut-off host sent, and only the fencing
epoch stands between its late writes and a duplicate: they are refused, and the host's
tree goes on with other work (the same tree: a partition is not damage, so no process
ends). Every run then ends succeeded with each unit written once."""

import signal

import pytest

from runs.models import Effect, Run
from runs.operator.selectors import workers_overview
from sandbox.models import Record
from tests.fleet.checks import assert_each_unit_once, writers
from tests.support.processes import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

STEPS = 6
HELD = 2  # the unit whose call a host is inside when its link goes down


def inside_the_held_call(fleet, run_ids):
    """(host, run) of a host inside a run's held call (None before)."""
    for run in Run.objects.filter(pk__in=run_ids):
        for host in fleet.hosts:
            if (run.lease_owner or "").startswith(f"{host.hostname}:") and \
                    fleet.inside(host, f"{run.id}-{HELD}"):
                return host, run
    return None


def taken_over(run_id: str, epoch: int, host, unit: str) -> bool:
    """Another host claimed the run (a newer epoch) and wrote the unit the cut-off host
    was about to write."""
    run = Run.objects.get(pk=run_id)
    return run.epoch > epoch and not (run.lease_owner or "").startswith(f"{host.hostname}:") \
        and Record.objects.filter(unit=unit).exists()


def shown_unreachable(host) -> bool:
    hosts = workers_overview()["hosts"]
    return host.hostname in hosts and all(
        cluster.problem.startswith("no heartbeat for")
        for cluster in hosts[host.hostname]["clusters"])


def test_a_partitioned_host_is_fenced_off_and_goes_on_with_other_work(fleet):
    fleet = fleet(hosts=3)
    trees = fleet.start_all(AGENTOPS_RUNS_PER_WORKER=2)
    run_ids = fleet.launch(4, steps=STEPS, delay=0.3, hold=HELD)
    # two units of 0.3 s first, on three trees just started together on CI's two cores
    host, run = wait_until(lambda: inside_the_held_call(fleet, run_ids), 40,
                           message="a host inside a held tool call")
    unit = f"{run.id}-{HELD}"
    for other in run_ids:  # the other runs go on
        if other != run.id:
            fleet.release(f"{other}-{HELD}")
    host.cut()
    try:
        # Its call ends while its link is down: the call's outcome is a late write.
        fleet.release(unit)
        wait_until(lambda: taken_over(run.id, run.epoch, host, unit), 30,
                   message="another host to take the run over")
        # The operator's Workers page shows the host cut off (its heartbeat stale, at 15 s).
        wait_until(lambda: shown_unreachable(host), 40,
                   message="the Workers page to show the host unreachable")
    finally:
        host.heal()
    tree = trees[host.hostname]
    # the writes arrive at TCP's next retransmission, whose wait doubled through the cut
    wait_until(lambda: f"run {run.id}: fenced off" in tree.output(), 60,
               message="the cut-off host's late writes refused")
    # Its late writes did not land: nothing of its epoch from the held call on.
    # (steps count from 1: unit HELD is written in step HELD + 1)
    late = Effect.objects.filter(run_id=run.id, epoch=run.epoch, step_no__gte=HELD + 1)
    assert not late.exists(), list(late.values_list("step_no", "seq", "status", "worker"))
    # The same tree goes on: the other hosts stop (handing their runs back), and it
    # finishes every run, and new ones.
    for other in fleet.hosts:
        if other is not host:
            trees[other.hostname].signal(signal.SIGTERM)
    run_ids += fleet.launch(2, steps=STEPS, delay=0.2)
    assert_each_unit_once(run_ids, STEPS, timeout=60)  # six runs' rest, on the one tree left
    assert tree.mains == [tree.proc] and tree.alive()  # never restarted
    assert host.hostname in writers(run.id) and len(writers(run.id)) >= 2
