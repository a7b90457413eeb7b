"""Latency and loss: 2% of the packets each host sends and receives dropped at random
(nftables' numgen, in each host's namespace), and 50 ± 20 ms added to everything on
its way to PostgreSQL (a delaying relay in front of PgBouncer: this kernel has no
netem). No run fails and nothing is written twice; the throughput is printed (pytest -s)
beside the same fleet's without loss or delay."""

import random
import shutil
import time

import pytest

from tests.fleet.checks import assert_each_unit_once

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

LOSS_PERCENT = 2
RUNS, STEPS = 9, 6


def database_delay() -> float:
    return random.uniform(0.030, 0.070)


def units_per_second(fleet) -> float:
    started = time.monotonic()
    run_ids = fleet.launch(RUNS, steps=STEPS, delay=0.05)
    # 54 units through 2% packet loss (each lost packet waits for TCP's retransmission,
    # 0.2 s or more) and 50 ms a chunk on the way to PostgreSQL
    assert_each_unit_once(run_ids, STEPS, timeout=120)
    return RUNS * STEPS / (time.monotonic() - started)


def test_runs_survive_loss_and_latency(fleet):
    if shutil.which("nft") is None:
        pytest.skip("nftables (nft) is needed: docs/fleet.md")
    plain = fleet(hosts=3)
    trees = plain.start_all(AGENTOPS_RUNS_PER_WORKER=4)
    baseline = units_per_second(plain)
    for tree in trees.values():
        tree.stop()
    slow = fleet(hosts=3, database_delay=database_delay)
    for host in slow.hosts:
        host.lose(LOSS_PERCENT)
    slow.start_all(AGENTOPS_RUNS_PER_WORKER=4)
    lossy = units_per_second(slow)
    assert slow.slow.connections > 0  # the hosts reached PostgreSQL through the delay
    assert all(host.lost() > 0 for host in slow.hosts)  # and lost packets
    print(f"\n3 hosts, {RUNS} runs of {STEPS} units: {baseline:.1f} units/s; with "
          f"{LOSS_PERCENT}% loss and 50 ± 20 ms to PostgreSQL {lossy:.1f} units/s "
          f"({lossy / baseline:.2f}x)")
