"""A whole worker host killed mid-run (every process in its network namespace SIGKILLed,
as a power cut leaves it): nothing on the host can hand its runs back or expire their
leases, so the other hosts take them once their leases run out (AGENTOPS_LEASE_SECONDS)
and finish them; each unit reaches the target once."""

import pytest

from runs.models import Run
from tests.fleet.checks import assert_each_unit_once, writers
from tests.support.processes import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

STEPS = 8


def holding(hosts, run_ids):
    """A host and the runs it holds that have written two units at least (None before)."""
    for host in hosts:
        held = [run.id for run in Run.objects.filter(pk__in=run_ids)
                if (run.lease_owner or "").startswith(f"{host.hostname}:")
                and run.progress_done >= 2]
        if held:
            return host, held
    return None


def test_a_host_killed_mid_run_leaves_its_runs_to_the_others(fleet):
    fleet = fleet(hosts=3)
    # No restart: a dead host stays dead (a fresh tree on it would free its leases at
    # once). Two runs a host: six runs spread over the three.
    trees = fleet.start_all(restart=False, AGENTOPS_RUNS_PER_WORKER=2)
    run_ids = fleet.launch(6, steps=STEPS, delay=0.3)
    victim, held = wait_until(lambda: holding(fleet.hosts, run_ids), 30,
                              message="a host to hold runs")
    tree = trees[victim.hostname]
    processes = {tree.pid, *tree.worker_pids()}
    killed = victim.kill_all()
    assert processes <= set(killed) and not victim.pids()
    assert_each_unit_once(run_ids, STEPS)
    for run_id in held:
        hosts = writers(run_id)
        assert victim.hostname in hosts and len(hosts) >= 2, (run_id, hosts)
