"""Scenarios 1-4 and 6 of issue 7 (5 is in resume.py). Each repetition measures
agentops, then its peer, then the next repetition: a noisy neighbour hits both."""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import sys
import time

from bench.compare import workload
from bench.compare.runner import Bench
from bench.compare.stats import Row, Samples


def _scaled(samples: Samples, factor: float = 1.0, invert: bool = False) -> Samples:
    return Samples([(1 / v if invert else v) * factor for v in samples.values])


# --- 1: durable steps ---------------------------------------------------------------------
def durable_steps(b: Bench) -> None:
    from bench.compare import dbos_peer, ours
    from bench.setup_db import raw_insert_floor

    n = b.sizes.effects

    def rep(_):
        floor = raw_insert_floor(b.url, b.sizes.floor_rows)
        one = ours.run_in_process("bench-effects", {"n": n})[1] / n
        with dbos_peer.running(b.url):
            dbos = dbos_peer.run_steps(n) / n
        many = ours.run_in_process("bench-steps", {"n": n})[1] / n
        return ({"floor": floor, "one": one, "dbos": dbos, "many": many},
                f"floor {floor * 1e3:.3f} ms; agentops {one * 1e3:.3f} ms/effect (one step), "
                f"{many * 1e3:.3f} ms/step (checkpointed); DBOS {dbos * 1e3:.3f} ms/step")

    s = b.repeat("1", rep)
    b.floor.values += s["floor"].values
    floor_ms = _scaled(s["floor"], 1e3)
    title, title_b = f"{n:,} no-op effects in one run", f"{n:,} steps of 1 effect, checkpoint each"
    b.rows += [
        Row("1", title, "steps/s", "/s", _scaled(s["one"], invert=True),
            _scaled(s["dbos"], invert=True), "DBOS", 4.0, True, ">= 4x DBOS",
            "agentops: one step making n ctx.call of an idempotent no-op tool; "
            "DBOS: a workflow of n @DBOS.step()"),
        Row("1", title, "time per effect", "ms", _scaled(s["one"], 1e3), floor_ms, "raw floor",
            1.5, False, "<= 1.5x floor"),
        Row("1b", title_b, "steps/s", "/s", _scaled(s["many"], invert=True),
            _scaled(s["dbos"], invert=True), "DBOS", None, True, "(info)",
            "agentops also snapshots the state after every step; DBOS keeps no snapshot"),
        Row("1b", title_b, "time per step", "ms", _scaled(s["many"], 1e3), floor_ms,
            "raw floor", None, False, "(info)"),
    ]


# --- 2: many small runs, real worker --------------------------------------------------------
def many_small_runs(b: Bench) -> None:
    from bench.compare import dbos_peer, ours
    from bench.compare.cluster import WorkerTree

    runs, steps = b.sizes.runs, b.sizes.run_effects
    cluster = WorkerTree(b.url)
    b.extra["qcluster_workers"] = cluster.workers

    def rep(_):
        since = time.time()
        ids = ours.launch_many("bench-effects", {"n": steps}, runs)
        launched = time.time() - since
        ours_rate = runs / ours.finished_span(ids, since, timeout=600)
        with dbos_peer.running(b.url):
            since = time.time()
            ids = dbos_peer.run_many(dbos_peer.queue(), runs, steps)
        dbos_rate = runs / _dbos_span(b.url, ids, since)
        return ({"ours": ours_rate, "dbos": dbos_rate, "launch": runs / launched},
                f"agentops {ours_rate:.1f} runs/s (launching alone: {runs / launched:.0f}/s), "
                f"DBOS {dbos_rate:.1f} workflows/s")

    try:
        s = b.repeat("2", rep)
    finally:
        cluster.stop()
    b.extra["launch_rate_per_s"] = s["launch"].as_dict()
    b.rows.append(Row(
        "2", f"{runs:,} runs of {steps} effects, launch to finished", "runs/s", "/s", s["ours"],
        s["dbos"], "DBOS", 3.0, True, ">= 3x DBOS",
        f"agentops: run_launch + a real worker tree ({cluster.workers} worker processes); "
        f"DBOS: Queue.enqueue, executed in-process (threads); both: first launch to last finish"))


def _dbos_span(url: str, workflow_ids: list[str], since: float) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        last = conn.execute("SELECT max(updated_at) FROM dbos.workflow_status "
                            "WHERE workflow_uuid = ANY(%s) AND status = 'SUCCESS'",
                            [workflow_ids]).fetchone()[0]
    return last / 1000 - since


# --- 3 and 4: what a step stores ----------------------------------------------------------------
def _marginal(run, tables: list[str], n: int, base: int) -> tuple[float, float, float]:
    """(bytes a step stores, steps/s, bytes a step of the tables' maps): the bytes of a run
    of base+n steps minus those of a run of base steps, over n. What n more steps store,
    without what any run costs once (its first snapshot, the first pages of each table and
    index in emptied tables: a run row alone took 80 KiB, 410 B a step of a 200-step run).
    The free-space and visibility maps, a table's and not its rows' (runs/storage/sizes.py),
    are measured apart and only shown."""
    from bench.compare import ours
    from runs.storage.sizes import table_bytes

    sizes, maps = [], []
    for steps in (base, base + n):
        ours.truncate(tables)
        before = table_bytes(tables), table_bytes(tables, forks=("fsm", "vm"))
        elapsed = run(steps)
        sizes.append(table_bytes(tables) - before[0])
        maps.append(table_bytes(tables, forks=("fsm", "vm")) - before[1])
    return (sizes[1] - sizes[0]) / n, (base + n) / elapsed, (maps[1] - maps[0]) / n


# --- 3: growing state ---------------------------------------------------------------------------
def growing_state(b: Bench, lg) -> None:
    from bench.compare import ours

    n, base = b.sizes.chat_steps, 2

    def rep(_):
        ours_bytes, ours_rate, ours_maps = _marginal(
            lambda k: ours.run_in_process("bench-chat", {"n": k})[1], list(ours.TABLES), n, base)
        lg_bytes, lg_rate, lg_maps = _marginal(lg.run_chat, lg.table_names(), n, base)
        return ({"ours_bytes": ours_bytes, "ours_rate": ours_rate, "lg_bytes": lg_bytes,
                 "lg_rate": lg_rate},
                f"agentops {ours_rate:.0f} steps/s {ours_bytes:.0f} B/step "
                f"(maps {ours_maps:.0f}); "
                f"LangGraph {lg_rate:.0f} steps/s {lg_bytes:.0f} B/step (maps {lg_maps:.0f})")

    s = b.repeat("3", rep)
    title = f"chat history +1 msg (~500 B) a step, {n} steps"
    # The change: a step's new message as JSON, the bytes a step adds to the state.
    change_bytes = sum(len(json.dumps(workload.message(i))) for i in range(base, base + n)) / n
    change = Samples([change_bytes] * len(s["ours_bytes"].values))
    b.rows += [
        Row("3", title, "stored bytes/step", "B", s["ours_bytes"], change,
            f"the change ({change_bytes:.0f} B)", 2.0, False, "<= 2x the change",
            "the message a step appends, as JSON"),
        Row("3", title, "stored bytes/step", "B", s["ours_bytes"], s["lg_bytes"], "LangGraph",
            0.5, False, "<= 0.5x LangGraph",
            "the tables' data (heap, indexes, TOAST; not their free-space maps); "
            "marginal: a run of 2+n steps minus one of 2"),
        Row("3", title, "steps/s", "/s", s["ours_rate"], s["lg_rate"], "LangGraph", 1.0, True,
            ">= 1x LangGraph", 'LangGraph: durability="sync", a checkpoint every step'),
    ]


# --- 4: large state, small changes ------------------------------------------------------------
def large_state(b: Bench, lg) -> None:
    from bench.compare import ours

    n, chunks, base = b.sizes.big_steps, b.sizes.big_chunks, 2

    def rep(_):
        ours_bytes, ours_rate, ours_maps = _marginal(
            lambda k: ours.run_in_process("bench-bigstate", {"n": k, "chunks": chunks})[1],
            list(ours.TABLES), n, base)
        lg_bytes, lg_rate, lg_maps = _marginal(lambda k: lg.run_big(k, chunks),
                                               lg.table_names(), n, base)
        return ({"ours_bytes": ours_bytes, "ours_rate": ours_rate, "lg_bytes": lg_bytes,
                 "lg_rate": lg_rate},
                f"agentops {ours_bytes / 1024:.1f} KiB/step (maps {ours_maps:.0f} B) "
                f"{ours_rate:.0f} steps/s; LangGraph {lg_bytes / 1024:.1f} KiB/step "
                f"(maps {lg_maps:.0f} B) {lg_rate:.1f} steps/s")

    s = b.repeat("4", rep)
    title = f"{chunks} KiB state, 1 KiB changes a step, {n} steps"
    change = Samples([1024.0] * len(s["ours_bytes"].values))
    b.rows += [
        Row("4", title, "stored bytes/step", "B", s["ours_bytes"], change, "the change (1 KiB)",
            4.0, False, "<= 4x the change", "marginal: a run of 2+n steps minus one of 2"),
        Row("4", title, "stored bytes/step", "B", s["ours_bytes"], s["lg_bytes"], "LangGraph",
            None, False, "(info)"),
        Row("4", title, "steps/s", "/s", s["ours_rate"], s["lg_rate"], "LangGraph", None, True,
            "(info)"),
    ]


# --- 6: concurrency -------------------------------------------------------------------------------
def concurrency(b: Bench) -> None:
    runs, window = b.sizes.active_runs, b.sizes.window

    def rep(_):
        ours_rate, ours_runs, ours_rss, workers = _ours_window(b, runs, window)
        dbos_rate, dbos_runs, dbos_rss = _dbos_window(b, runs, window)
        b.extra["qcluster_workers"] = workers
        return ({"ours_rate": ours_rate, "ours_runs": ours_runs, "ours_rss": ours_rss,
                 "dbos_rate": dbos_rate, "dbos_runs": dbos_runs, "dbos_rss": dbos_rss},
                f"agentops {ours_rate:.1f} effects/s, {ours_runs:.0f}/{runs} runs progressed, "
                f"{ours_rss:.0f} MiB, {b.extra['s6_peak_connections'][-1]} PostgreSQL "
                f"connections (launch {b.extra['s6_launch_seconds'][-1]} s); DBOS "
                f"{dbos_rate:.1f} effects/s, {dbos_runs:.0f}/{runs}, {dbos_rss:.0f} MiB "
                f"(enqueue {b.extra['s6_dbos_enqueue_seconds'][-1]} s)")

    s = b.repeat("6", rep)
    title = f"{runs:,} active runs, tool sleeps 1 s, {window:.0f} s window"
    everyone = Samples([float(runs)] * len(s["ours_runs"].values))
    b.rows += [
        Row("6", title, "effects/s", "/s", s["ours_rate"], s["dbos_rate"], "DBOS", None, True,
            "(reported)", f"agentops: one worker tree of {b.extra.get('qcluster_workers')} "
            f"worker process(es) holding up to {b.extra.get('runs_per_worker_process')} runs "
            "each; DBOS: one process, its Queue without a concurrency limit (a thread "
            "per workflow)"),
        Row("6", title, "runs that progressed", "runs", s["ours_runs"], everyone, "all runs",
            1.0, True, "all progress", "runs with an effect finished by the window's end"),
        Row("6", title, "runs that progressed", "runs", s["ours_runs"], s["dbos_runs"], "DBOS",
            None, True, "(reported)"),
        Row("6", title, "peak memory (PSS)", "MiB", s["ours_rss"], s["dbos_rss"], "DBOS",
            1.0, False, "<= DBOS",
            "agentops: the tree's main + workers; DBOS: one process"),
    ]


def _ours_window(b: Bench, runs: int, window: float):
    """Launch every run first (queued, their tasks in the broker), then start the
    worker cluster: the window opens when its workers are up, as DBOS's does."""
    from bench.compare import ours
    from bench.compare.cluster import WorkerTree

    # One worker process holding every run, as DBOS runs them in one process: on two
    # cores shared with PostgreSQL a second process only adds a GIL-bound competitor
    # for the cores (measured: 539 vs 388 effects/s, 182 vs 227 MiB, 14 vs 24
    # connections). The default cluster (a process per core) is in the README.
    b.extra["runs_per_worker_process"] = runs
    ids, cluster = [], None
    try:
        t0 = time.time()
        ids = ours.launch_many("bench-llm", {"n": 1000, "seconds": 1.0}, runs)
        b.extra.setdefault("s6_launch_seconds", []).append(round(time.time() - t0, 2))
        cluster = WorkerTree(b.url, workers=1, AGENTOPS_RUNS_PER_WORKER=runs)
        start = time.time()
        connections = []

        def sample():
            connections.append(cluster.connections())
            return cluster.memory()

        peak = _peak(sample, window)
        end = time.time()
        b.extra.setdefault("s6_peak_connections", []).append(max(connections, default=0))
        done, progressed = ours.effects_between(ids, start, end)
    finally:
        if cluster is not None:
            cluster.stop()
        ours.abandon(ids)
    return done / (end - start), progressed, peak / 2**20, cluster.workers


def _dbos_window(b: Bench, runs: int, window: float):
    """DBOS executes the same workload in a process of its own (its memory is its own),
    from its queue, where the bench process put the workflows first."""
    import psutil
    import psycopg

    from bench.compare import dbos_peer

    t0 = time.time()
    with dbos_peer.running(b.url):
        dbos_peer.enqueue_llm(runs, 1000, 1.0)
    b.extra.setdefault("s6_dbos_enqueue_seconds", []).append(round(time.time() - t0, 2))
    child = subprocess.Popen([sys.executable, "-m", "bench.compare.dbos_peer", "llm", b.url],
                             stdout=subprocess.PIPE, start_new_session=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 120)
        if not ready or not child.stdout.readline():  # "launched"
            raise RuntimeError("the DBOS child did not start")
        start = time.time()
        peak = _peak(lambda: psutil.Process(child.pid).memory_full_info().pss, window)
        end = time.time()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with psycopg.connect(b.url, autocommit=True) as conn:
        done, progressed = conn.execute("""
            SELECT count(*) FILTER (WHERE o.completed_at_epoch_ms >= %s
                                      AND o.completed_at_epoch_ms < %s),
                   count(DISTINCT o.workflow_uuid) FILTER (WHERE o.completed_at_epoch_ms < %s)
            FROM dbos.operation_outputs o JOIN dbos.workflow_status w USING (workflow_uuid)
            WHERE w.queue_name = 'bench-llm' AND w.status IN ('PENDING', 'ENQUEUED')""",
                                        [start * 1000, end * 1000, end * 1000]).fetchone()
        conn.execute("UPDATE dbos.workflow_status SET status = 'CANCELLED' "
                     "WHERE queue_name = 'bench-llm' AND status IN ('PENDING', 'ENQUEUED')")
    return done / (end - start), progressed, peak / 2**20


def _peak(read, seconds: float) -> float:
    peak, end = 0.0, time.monotonic() + seconds
    while time.monotonic() < end:
        with contextlib.suppress(Exception):  # a process went away between two samples
            peak = max(peak, read())
        time.sleep(0.5)
    return peak
