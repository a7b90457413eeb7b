"""What a worker tree (`manage.py worker`, docs/workers.md) costs while it waits, and how
long a launch waits for it: one tree of two worker processes on PostgreSQL.

    python -m bench.runtime_idle [LAUNCHES] [IDLE_SECONDS] [STARTS]

* a tree's start, from its command to a whole tree, STARTS times: what a crash-only
  tree adds to a recovery (the service manager starts a fresh one);
* idle: the tree's CPU (every process of it, and its PostgreSQL backends) and the
  database's committed transactions (pg_stat_database, read from another database)
  over IDLE_SECONDS, with nothing to run; its memory (PSS, so pages the forked
  workers share with their main are counted once);
* a launch (`services.run_launch`), then from the launch to the run's first effect
  on the idle tree: a `ticker` run of one step, launched at a random moment of the
  tree's poll cycle, one at a time;
* an idle worker's poll (`Store.due_runs`), then with 100,000 ended runs more.

Baselines in the same process: the same window with no tree, one bare PostgreSQL
connection open and doing nothing (what the database counts anyway); one Django
process, started, set up and waiting (its set-up time, and the memory of a process
that does nothing); a one-row INSERT + COMMIT in autocommit (the floor of any durable
launch); the poll with only this bench's runs in the table.
"""

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import psycopg

from bench.setup_db import ROOT, raw_insert_floor, setup_django

MIB = 1024 * 1024
SETTLE_SECONDS = 5.0     # after the tree is whole: its start-up writes are over


def start_tree(tmp: Path):
    """The Procfile's `manage.py worker` with two worker processes, as bench.recovery
    starts one (tests/support/processes.py)."""
    from tests.support.processes import Cluster

    return Cluster(tmp, workers=2, name="idle")


def main(launches: int = 20, idle_seconds: float = 30.0, starts: int = 3):
    url = setup_django()
    os.environ["AGENTOPS_AGENT_MODULES"] = "tests.workload_agents"
    from django.db import connection

    import tests.workload_agents  # noqa: F401  (registers "ticker" in this process)

    name = connection.settings_dict["NAME"]
    stats_url = url.rsplit("/", 1)[0] + "/postgres"
    floor = raw_insert_floor(url)
    with psycopg.connect(url, autocommit=True):  # a bare connection, doing nothing
        time.sleep(SETTLE_SECONDS)  # the inserts' counts are reported
        base = idle_window(stats_url, name, [], idle_seconds)
    setups = [baseline_django(url) for _ in range(starts)]
    django_setup = statistics.median(seconds for seconds, _ in setups)
    django_pss = statistics.median(pss for _, pss in setups)
    print(f"baseline, no tree: {base['xacts']:.2f} transactions/s in {name} "
          f"(one bare connection open, doing nothing)")
    print(f"baseline, one Django process: set up in {django_setup:.2f} s (median of "
          f"{starts}), then waiting: {django_pss / MIB:.1f} MiB PSS")
    print(f"baseline, one-row INSERT + COMMIT (autocommit): {floor * 1000:.3f} ms")

    tmp = Path(tempfile.mkdtemp(prefix="agentops-idle-"))
    tree = whole_tree(tmp, starts, django_setup)
    try:
        time.sleep(SETTLE_SECONDS)
        pids = tree.all_pids()
        idle = idle_window(stats_url, name, pids, idle_seconds)
        pss = sum(_pss(pid) for pid in pids)
        report_idle(idle, base, pss, django_pss, len(pids), idle_seconds)
        launch, first = launch_latencies(tree, launches)
        report_launches(launch, first, floor)
    finally:
        tree.stop()
    report_poll(finished_runs=100_000)


def whole_tree(tmp: Path, starts: int, django_setup: float):
    """The tree started `starts` times, each timed from its command to a whole tree (as
    after a crash: the service manager's start of a fresh one); returns the last."""
    from tests.support.processes import wait_until

    seconds, tree = [], None
    for _ in range(starts):
        if tree is not None:
            tree.stop()
        t0 = time.perf_counter()
        tree = start_tree(tmp)
        wait_until(tree.tree_ready, 60, interval=0.01, message="a whole tree")
        seconds.append(time.perf_counter() - t0)
    print(f"a tree's start, from its command to a whole tree: median "
          f"{statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max "
          f"{max(seconds):.2f}, n={starts}); {statistics.median(seconds) / django_setup:.2f}x "
          f"one Django process's set-up")
    return tree


def idle_window(stats_url: str, name: str, pids: list[int], seconds: float) -> dict:
    """Transactions committed in database `name` per second over `seconds`, and the CPU
    seconds per second of `pids` and of the database's backends (but this process's)."""
    with psycopg.connect(stats_url, autocommit=True) as stats:
        backends = _backends(stats, name)
        procs = [p for p in map(_process, [*pids, *backends]) if p is not None]
        cpu0 = {p.pid: _cpu(p) for p in procs}
        xact0 = _xacts(stats, name)
        start = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        xact1 = _xacts(stats, name)
        cpu1 = {p.pid: _cpu(p) for p in procs}
    alive = [pid for pid in cpu0 if cpu1[pid] is not None and cpu0[pid] is not None]
    tree = sum(cpu1[pid] - cpu0[pid] for pid in alive if pid in pids)
    server = sum(cpu1[pid] - cpu0[pid] for pid in alive if pid in backends)
    return {"xacts": (xact1 - xact0) / elapsed, "cpu": tree / elapsed,
            "server_cpu": server / elapsed, "backends": len(backends)}


def _backends(stats, name: str) -> list[int]:
    from django.db import connection

    connection.ensure_connection()
    own = connection.cursor().connection.info.backend_pid
    rows = stats.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                         (name, own)).fetchall()
    return [pid for (pid,) in rows]


def _xacts(stats, name: str) -> int:
    # Backends report their counts at most once a second: a long window hides it.
    stats.execute("SELECT pg_stat_clear_snapshot()")
    return stats.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                         "WHERE datname = %s", (name,)).fetchone()[0]


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _cpu(process) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _pss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_full_info().pss
    except psutil.Error:
        return 0


def baseline_django(url: str) -> tuple[float, int]:
    """Seconds for one process to start and set Django up (the project's apps imported),
    and its PSS once it waits."""
    code = "import sys, django; django.setup(); print('ready', flush=True); sys.stdin.read()"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "agentops.settings",
           "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the baseline Django process did not start")
        return time.perf_counter() - t0, _pss(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(30)


def launch_latencies(tree, launches: int) -> tuple[list[float], list[float]]:
    """Seconds of each `run_launch`, and from its start to the run's first effect."""
    from runs.models import Run
    from tests.support.processes import wait_until

    rng = random.Random(30)
    launch, first = [], []
    for _ in range(launches):
        wait_until(lambda: not Run.objects.filter(lease_owner__isnull=False).exists(), 30,
                   message="an idle tree")
        time.sleep(rng.uniform(0.0, 0.5))  # a random moment of the tree's poll cycle
        seconds, to_effect = one_launch()
        launch.append(seconds)
        first.append(to_effect)
    return launch, first


def one_launch() -> tuple[float, float]:
    """A one-step `ticker` run: the launch's seconds, and from its start to the first
    effect; returns once the run has ended."""
    from runs import services
    from runs.models import Effect, Run
    from tests.support.processes import wait_until

    start, t0 = time.time(), time.perf_counter()
    run = services.run_launch(user=None, agent="ticker", inputs={"steps": 1, "delay": 0})
    seconds = time.perf_counter() - t0
    effect = wait_until(lambda: Effect.objects.filter(run_id=run.id).order_by("started_at")
                        .first(), 30, interval=0.01, message="the first effect")
    wait_until(lambda: Run.objects.get(pk=run.id).status == "succeeded", 30,
               message="the run's end")
    return seconds, effect.started_at.timestamp() - start


def report_idle(idle: dict, base: dict, pss: int, django_pss: int, processes: int,
                seconds: float) -> None:
    extra = idle["xacts"] - base["xacts"]
    print(f"idle tree ({processes} processes, {seconds:.0f} s): {idle['xacts']:.2f} "
          f"transactions/s, {extra:.2f}/s more than the baseline "
          f"({_ratio(idle['xacts'], base['xacts'])})")
    print(f"idle tree CPU: {idle['cpu'] * 100:.2f}% of a core; its "
          f"{idle['backends']} PostgreSQL backends {idle['server_cpu'] * 100:.2f}%")
    print(f"idle tree memory: {pss / MIB:.1f} MiB PSS "
          f"({pss / django_pss:.2f}x one Django process)")


def report_launches(launch: list[float], first: list[float], floor: float) -> None:
    for label, values in (("launch (run_launch)", launch),
                          ("launch to first effect, idle tree", first)):
        median = statistics.median(values)
        print(f"{label}: median {median * 1000:.1f} ms (min {min(values) * 1000:.1f}, "
              f"max {max(values) * 1000:.1f}, n={len(values)}); "
              f"{median / floor:.0f}x the one-row INSERT + COMMIT")


def report_poll(finished_runs: int, calls: int = 200) -> None:
    """An idle worker's poll (`Store.due_runs` with its agent codes, as a free slot asks),
    with the runs launched above, then with `finished_runs` more that have ended."""
    from django.db import connection

    from runs.models import Run

    small, small_plan = _poll_seconds(calls), _poll_plan()
    template = Run.objects.filter(status="succeeded").values_list("id", flat=True).first()
    columns = [f.column for f in Run._meta.concrete_fields]
    names = ", ".join(f'"{c}"' for c in columns)
    exprs = ", ".join("substr(md5(random()::text || g), 1, 32)" if c == "id" else
                      "NULL" if c == "spawn_key" else f'r."{c}"' for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO runs_run ({names}) SELECT {exprs} FROM runs_run r, "
                       "generate_series(1, %s) g WHERE r.id = %s", [finished_runs, template])
        cursor.execute("ANALYZE runs_run")
    large, large_plan = _poll_seconds(calls), _poll_plan()
    print(f"an idle worker's poll (due_runs): median {small * 1000:.3f} ms with "
          f"{Run.objects.count() - finished_runs} runs, {large * 1000:.3f} ms with "
          f"{finished_runs:,} more ended runs ({large / small:.2f}x); in PostgreSQL "
          f"{small_plan[0]:.3f} ms, then {large_plan[0]:.3f} ms ({large_plan[1]})")


def _poll_seconds(calls: int) -> float:
    from runs.worker import fleet
    from runs.worker.execute import store

    runs, codes, times = store(), fleet.worker_codes(), []
    for _ in range(calls):
        t0 = time.perf_counter()
        runs.due_runs(time.time(), 3, exclude=[], codes=codes)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _poll_plan() -> tuple[float, str]:
    """The poll's execution time in PostgreSQL (EXPLAIN ANALYZE of the statement the
    store sent, the median of 20) and its plan's scans."""
    import re

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.worker import fleet
    from runs.worker.execute import store

    with CaptureQueriesContext(connection) as sent:
        store().due_runs(time.time(), 3, exclude=[], codes=fleet.worker_codes())
    sql = [q["sql"] for q in sent.captured_queries if "runs_run" in q["sql"]][-1]
    with connection.cursor() as cursor:
        plans = []
        for _ in range(20):
            cursor.execute(f"EXPLAIN (ANALYZE) {sql}")
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    ms = statistics.median(float(re.search(r"Execution Time: ([0-9.]+) ms", plan).group(1))
                           for plan in plans)
    scans = re.findall(r"(BitmapOr|Bitmap Index Scan on \w+|Index Scan using \w+|"
                       r"Seq Scan on \w+)", plans[-1])
    return ms, ", ".join(dict.fromkeys(scans))


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.1f}x the baseline" if base > 0 else "the baseline is 0"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20,
         float(sys.argv[2]) if len(sys.argv) > 2 else 30.0,
         int(sys.argv[3]) if len(sys.argv) > 3 else 3)
