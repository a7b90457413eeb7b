"""A fleet of worker hosts (docs/fleet.md): hosts in network namespaces, each a worker tree
reaching PostgreSQL only through PgBouncer in transaction mode (tests/support/fleet.py).

    sudo -E .venv/bin/python -m bench.fleet [PARTITIONS [PART ...]]

PART: scaling, commits, healing, duplicates (all by default).

Needs what tests/fleet needs (root, iproute2, Debian's pgbouncer); its own database
(BENCH_DATABASE_URL, default agentops_bench_fleet), migrated fresh. Prints:

1. runs/s with 1, 2 and 4 hosts (one worker process of 10 run slots each) for runs whose
   tool waits 1 s, three times: I/O-bound, the fleet should scale with its slots (the
   ratio to 1 host);
2. no-op effects/s with 1, 2 and 4 hosts, bound by PostgreSQL's commits through
   PgBouncer, against the floor in the same process: a one-row INSERT and COMMIT a
   statement, one connection, through the same PgBouncer; and against a single host as
   `bench compare` measures one (PostgreSQL reached directly, no namespace, no
   PgBouncer): the same runs on one worker tree, and its scenario 1 (1,000 no-op
   effects in one run, executed in this process), with the direct floor beside them;
3. the time from a host's death (every process SIGKILLed) and from its partition (its
   link down) to its run's next effect on another host, p50 and p95 (lease 2 s: target
   p95 under 2x the lease);
4. the units written twice after PARTITIONS (20) partitions of random hosts, at random
   moments, for random lengths around the lease, healed: 0 (a notification, which is not
   idempotent, cut off in flight is in doubt: resolved as an operator would, by looking
   downstream, and counted).
"""

import os
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from datetime import timezone as dt_timezone
from pathlib import Path

from bench.setup_db import raw_insert_floor, setup_django

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench_fleet"
LEASE = 2.0


def main(partitions: int = 20, parts: tuple[str, ...] = ()) -> int:
    from tests.support import netns

    # a stop (SIGTERM) tears the hosts down as an error does (finally blocks, at exit)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    reason = netns.unavailable()
    if reason:
        print(f"bench.fleet: {reason}")
        return 2
    os.environ.setdefault("BENCH_DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("AGENTOPS_AGENT_MODULES", "tests.fleet.agents")
    setup_django()
    tmp = Path(tempfile.mkdtemp(prefix="agentops-fleet-"))
    chosen = parts or ("scaling", "commits", "healing", "duplicates")
    for part in chosen:
        if part == "duplicates":
            duplicates(tmp, partitions)
        else:
            {"scaling": scaling, "commits": commits, "healing": healing}[part](tmp)
    return 0


def _fleet(tmp: Path, hosts: int):
    from tests.support.fleet import Fleet

    return Fleet(tmp, hosts)


def _finished(run_ids, timeout: float = 300):
    """Wait for the runs to end; a non-idempotent call whose outcome a cut cost (in doubt)
    is resolved as an operator would: looked up downstream."""
    from tests.crash.helpers import wait_final

    runs = wait_final(run_ids, timeout=timeout)
    failed = [r.id for r in runs.values() if r.status != "succeeded"]
    assert not failed, f"runs that did not succeed: {failed}"


def scaling(tmp: Path) -> None:
    print("runs/s, 40 runs of 3 units whose tool waits 1 s, 10 run slots a host:")
    base = None
    for hosts in (1, 2, 4):
        fleet = _fleet(tmp, hosts)
        try:
            fleet.start_all(AGENTOPS_RUNS_PER_WORKER=10)
            started = time.monotonic()
            _finished(fleet.launch(40, steps=3, delay=1.0))
            rate = 40 / (time.monotonic() - started)
        finally:
            fleet.stop()
        base = base or rate
        print(f"  {hosts} host(s): {rate:.2f} runs/s ({rate / base:.2f}x 1 host)")


def commits(tmp: Path) -> None:
    print(f"no-op effects/s (20 runs of 100 effects, 10 slots a host); load average "
          f"{' / '.join(f'{v:.2f}' for v in os.getloadavg())} (1 / 5 / 15 min):")
    single, direct_floor = _single_host()
    for hosts in (1, 2, 4):
        fleet = _fleet(tmp, hosts)
        try:
            if hosts == 1:
                floor = raw_insert_floor(fleet.pgbouncer.url)
                print(f"  floor: one-row INSERT + COMMIT through PgBouncer, one connection: "
                      f"{1 / floor:.0f}/s ({direct_floor / floor:.2f}x direct)")
            fleet.start_all(AGENTOPS_RUNS_PER_WORKER=10)
            rate = _noop_effects_per_s()
        finally:
            fleet.stop()
        print(f"  {hosts} host(s) through PgBouncer: {rate:.0f} effects/s "
              f"({rate / single:.2f}x the single host, {rate * floor:.2f}x the floor)")
    print(f"  load average after: {' / '.join(f'{v:.2f}' for v in os.getloadavg())}")


def _single_host(reps: int = 3) -> tuple[float, float]:
    """(effects/s of the fleet's runs on one worker tree here, the direct floor's seconds
    per commit): `bench compare`'s configuration, PostgreSQL reached directly. Printed
    beside `bench compare`'s scenario 1, run here by its own code."""
    from bench.compare import ours
    from bench.compare.cluster import WorkerTree
    from tests.support.fleet import LEASE_SECONDS
    from tests.support.processes import NO_TIME_SLICES

    url = os.environ["DATABASE_URL"]
    floor = raw_insert_floor(url)
    print(f"  floor: one-row INSERT + COMMIT, PostgreSQL directly, one connection: "
          f"{1 / floor:.0f}/s")
    # the fleet's host settings (tests/support/fleet.py), bar the network and PgBouncer
    tree = WorkerTree(url, workers=1, AGENTOPS_RUNS_PER_WORKER=10,
                      AGENTOPS_AGENT_MODULES="tests.fleet.agents",
                      AGENTOPS_LEASE_SECONDS=LEASE_SECONDS, AGENTOPS_WORKER_DB_POOL=3,
                      **NO_TIME_SLICES)
    try:
        rate = _noop_effects_per_s()
    finally:
        tree.stop()
    print(f"  single host, one worker tree, PostgreSQL directly: {rate:.0f} effects/s "
          f"({rate * floor:.2f}x the direct floor)")
    n = 1000  # bench compare's scenario 1 (runner.Sizes.effects)
    per_s = statistics.median(n / ours.run_in_process("bench-effects", {"n": n})[1]
                              for _ in range(reps))
    print(f"  bench compare's scenario 1, {n:,} no-op effects in one run in this process, "
          f"median of {reps}: {per_s:.0f} effects/s ({per_s * floor:.2f}x the direct floor)")
    return rate, floor


def _noop_effects_per_s() -> float:
    """Effects/s of 20 runs of 100 no-op effects on the trees running now, from launch
    to the last run's end."""
    from runs import services
    from runs.models import Effect

    before = Effect.objects.count()
    started = time.monotonic()
    ids = [services.run_launch(user=None, agent="fleet_noop", inputs={"calls": 100}).id
           for _ in range(20)]
    _finished(ids)
    return (Effect.objects.count() - before) / (time.monotonic() - started)


def healing(tmp: Path, rounds: int = 8) -> None:
    from tests.support.processes import wait_until

    fleet = _fleet(tmp, 3)
    try:
        trees = fleet.start_all(restart=False, AGENTOPS_RUNS_PER_WORKER=10)
        for kind in ("death", "partition"):
            times = []
            for _ in range(rounds):
                host, run_id = _holder(fleet, fleet.launch(1, steps=1000, delay=0.05))
                struck = time.time()
                if kind == "death":
                    host.kill_all()
                else:
                    host.cut()
                times.append(wait_until(lambda r=run_id, h=host, t=struck: _next_effect(r, h, t),
                                        60, interval=0.01) - struck)
                _cancel(run_id)
                if kind == "death":  # the host comes back: a fresh tree
                    trees[host.hostname] = fleet.start(host, restart=False,
                                                       AGENTOPS_RUNS_PER_WORKER=10)
                else:
                    host.heal()
            p50, p95 = statistics.median(times), _p95(times)
            print(f"a host's {kind} to its run's next effect elsewhere ({rounds} rounds, lease "
                  f"{LEASE:.0f} s): p50 {p50:.2f} s, p95 {p95:.2f} s ({p95 / LEASE:.2f}x lease)")
    finally:
        fleet.stop()


def _holder(fleet, run_ids):
    """(host, run) once a host holds the run and has written a unit of it."""
    from runs.models import Run
    from tests.support.processes import wait_until

    def held():
        run = Run.objects.get(pk=run_ids[0])
        host = next((h for h in fleet.hosts
                     if (run.lease_owner or "").startswith(f"{h.hostname}:")), None)
        return (host, run.id) if host is not None and run.progress_done >= 1 else None
    return wait_until(held, 60, message="a host to hold the run")


def _next_effect(run_id: str, host, since: float) -> float | None:
    """When another host began the run's first effect after `since` (None before)."""
    from runs.models import Effect

    effect = (Effect.objects.filter(run_id=run_id, started_at__gt=_dt(since))
              .exclude(worker__startswith=f"{host.hostname}:").order_by("started_at").first())
    return effect.started_at.timestamp() if effect else None


def _cancel(run_id: str) -> None:
    from runs import services

    services.run_cancel(run_id=run_id, user="bench", reason="measured")


def duplicates(tmp: Path, partitions: int) -> None:
    from runs.models import RunEvent
    from tests.crash.helpers import assert_outside_world_clean

    fleet = _fleet(tmp, 3)
    run_ids: list[str] = []
    try:
        fleet.start_all(AGENTOPS_RUNS_PER_WORKER=10)
        rng = random.Random(int(os.environ.get("FLEET_SEED", "31")))
        for _ in range(partitions):
            run_ids += fleet.launch(3, steps=20, delay=0.1)
            time.sleep(rng.uniform(0.2, 1.0))  # a random moment: what this bench is about
            host = rng.choice(fleet.hosts)
            host.cut()
            time.sleep(rng.uniform(0.5, 2.5) * LEASE)  # shorter and longer than the lease
            host.heal()
        _finished(run_ids)
        written = assert_outside_world_clean(run_ids)
        twice = sum(n > 1 for n in written.values())
        in_doubt = RunEvent.objects.filter(run_id__in=run_ids, kind="status",
                                           data__status="needs_attention").count()
        print(f"{partitions} partitions healed at random moments, {len(run_ids)} runs: "
              f"{len(written)} units written, {twice} twice; {in_doubt} notifications "
              "(not idempotent) in doubt, resolved by looking downstream")
    except AssertionError as exc:
        print(f"{partitions} partitions healed at random moments: FAILED: {exc}")
    finally:
        fleet.stop()


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=dt_timezone.utc)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, tuple(sys.argv[2:])))
