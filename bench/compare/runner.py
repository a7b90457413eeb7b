"""The comparison runner: each scenario alternates agentops and its peer, sample by
sample, in this process tree, against one PostgreSQL database (Django's tables in
`public`, DBOS in schema `dbos`, LangGraph in schema `langgraph`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from bench.compare.stats import Row, Samples

URL = "postgresql://postgres@127.0.0.1:5432/agentops_compare"


@dataclass
class Sizes:
    reps: int
    effects: int           # 1: effects in one run / steps in one DBOS workflow
    runs: int              # 2: small runs through the worker
    run_effects: int
    chat_steps: int        # 3
    big_steps: int         # 4: measured steps (after a short run that is subtracted)
    big_chunks: int
    resume_sizes: list     # 5: effects before the crash (agentops)
    dbos_resume_sizes: list
    active_runs: int       # 6
    window: float
    floor_rows: int

    @classmethod
    def for_mode(cls, quick: bool) -> "Sizes":
        if quick:
            return cls(reps=3, effects=1000, runs=200, run_effects=5, chat_steps=200,
                       big_steps=20, big_chunks=1024, resume_sizes=[5_000, 50_000],
                       dbos_resume_sizes=[5_000], active_runs=1000, window=8.0,
                       floor_rows=1000)
        return cls(reps=5, effects=1000, runs=1000, run_effects=5, chat_steps=200,
                   big_steps=50, big_chunks=1024, resume_sizes=[5_000, 50_000, 500_000],
                   dbos_resume_sizes=[5_000], active_runs=1000, window=15.0, floor_rows=2000)


@dataclass
class Bench:
    url: str
    sizes: Sizes
    rows: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    floor: Samples = field(default_factory=Samples)

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- scenario 1 ------------------------------------------------------------------------------
def durable_steps(b: Bench) -> None:
    from bench.compare import dbos_peer, ours
    from bench.setup_db import raw_insert_floor

    n = b.sizes.effects
    one_step, many_steps, dbos = Samples(), Samples(), Samples()
    for rep in range(b.sizes.reps):
        b.floor.add(raw_insert_floor(b.url, b.sizes.floor_rows))
        _, t = ours.run_in_process("bench-effects", {"n": n})
        one_step.add(t / n)
        d = dbos.add(dbos_peer.run_steps(n) / n)
        _, t = ours.run_in_process("bench-steps", {"n": n})
        many_steps.add(t / n)
        b.log(f"1 rep {rep + 1}: floor {b.floor.values[-1] * 1e3:.3f} ms, agentops "
              f"{one_step.values[-1] * 1e3:.3f} ms/effect (1 step), "
              f"{t / n * 1e3:.3f} ms/step (checkpointed), DBOS {d * 1e3:.3f} ms/step")
    rate = lambda s: Samples([1 / v for v in s.values])  # noqa: E731
    ms = lambda s: Samples([v * 1e3 for v in s.values])  # noqa: E731
    title = f"{n:,} no-op effects in one run"
    b.rows += [
        Row("1", title, "steps/s", "/s", rate(one_step), rate(dbos), "DBOS", 4.0, True,
            ">= 4x DBOS"),
        Row("1", title, "time per effect", "ms", ms(one_step), ms(b.floor), "raw floor", 2.0,
            False, "<= 2x floor"),
        Row("1b", f"{n:,} steps of 1 effect, checkpoint each", "steps/s", "/s",
            rate(many_steps), rate(dbos), "DBOS", None, True, "(info)",
            "agentops also snapshots the state after every step; DBOS has no snapshot"),
        Row("1b", f"{n:,} steps of 1 effect, checkpoint each", "time per step", "ms",
            ms(many_steps), ms(b.floor), "raw floor", None, False, "(info)"),
    ]


# --- scenario 2 ------------------------------------------------------------------------------
def many_small_runs(b: Bench) -> None:
    from bench.compare import dbos_peer, ours
    from bench.compare.cluster import QCluster

    runs, steps = b.sizes.runs, b.sizes.run_effects
    q = dbos_peer.queue()
    cluster = QCluster(b.url)
    b.extra["qcluster_workers"] = cluster.workers
    ours_rate, dbos_rate = Samples(), Samples()
    try:
        for rep in range(b.sizes.reps):
            since = time.time()
            ids = ours.launch_many("bench-effects", {"n": steps}, runs)
            span = ours.finished_span(ids, since, timeout=600)
            ours_rate.add(runs / span)
            since = time.time()
            wf_ids = dbos_peer.run_many(q, runs, steps)
            span = _dbos_span(b.url, wf_ids, since)
            dbos_rate.add(runs / span)
            b.log(f"2 rep {rep + 1}: agentops {ours_rate.values[-1]:.1f} runs/s "
                  f"(qcluster, {cluster.workers} workers), DBOS {dbos_rate.values[-1]:.1f} "
                  f"workflows/s (queue)")
    finally:
        cluster.stop()
    b.rows.append(Row("2", f"{runs:,} runs of {steps} effects, launch to finished",
                      "runs/s", "/s", ours_rate, dbos_rate, "DBOS", 1.0, True, ">= 1x DBOS",
                      f"agentops: real qcluster ({cluster.workers} worker processes); "
                      "DBOS: its Queue in-process (threads)"))


def _dbos_span(url: str, workflow_ids: list[str], since: float) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        last = conn.execute("SELECT max(updated_at) FROM dbos.workflow_status "
                            "WHERE workflow_uuid = ANY(%s) AND status = 'SUCCESS'",
                            [workflow_ids]).fetchone()[0]
    return last / 1000 - since


# --- scenario 3 and 4 ------------------------------------------------------------------------
def growing_state(b: Bench, lg) -> None:
    from bench.compare import ours

    n = b.sizes.chat_steps
    ours_bytes, ours_rate, lg_bytes, lg_rate = Samples(), Samples(), Samples(), Samples()
    for rep in range(b.sizes.reps):
        ours.truncate(["runs_run"])
        before = ours.table_bytes()
        _, t = ours.run_in_process("bench-chat", {"n": n})
        ours_rate.add(n / t)
        ours_bytes.add((ours.table_bytes() - before) / n)
        ours.truncate(lg.table_names())
        before = ours.table_bytes(lg.table_names())
        t = lg.run_chat(n)
        lg_rate.add(n / t)
        lg_bytes.add((ours.table_bytes(lg.table_names()) - before) / n)
        b.log(f"3 rep {rep + 1}: agentops {ours_rate.values[-1]:.0f} steps/s "
              f"{ours_bytes.values[-1]:.0f} B/step; LangGraph {lg_rate.values[-1]:.0f} steps/s "
              f"{lg_bytes.values[-1]:.0f} B/step")
    title = f"chat history +1 msg (~500 B) a step, {n} steps"
    b.rows += [
        Row("3", title, "stored bytes/step", "B", ours_bytes, lg_bytes, "LangGraph", 0.5, False,
            "<= 0.5x LangGraph", "pg_total_relation_size of the tables (indexes, TOAST)"),
        Row("3", title, "steps/s", "/s", ours_rate, lg_rate, "LangGraph", 1.0, True,
            ">= 1x LangGraph", 'LangGraph durability="sync"'),
    ]


def large_state(b: Bench, lg) -> None:
    from bench.compare import ours

    n, chunks, base = b.sizes.big_steps, b.sizes.big_chunks, 2
    ours_bytes, lg_bytes, ours_rate, lg_rate = Samples(), Samples(), Samples(), Samples()

    def measured(run, tables):
        """Bytes of a run of base+n steps minus those of a run of base steps: the
        marginal bytes of n steps, without the initial 1 MB state."""
        ours.truncate(tables)
        before = ours.table_bytes(tables)
        run(base)
        short = ours.table_bytes(tables) - before
        ours.truncate(tables)
        before = ours.table_bytes(tables)
        t = run(base + n)
        return (ours.table_bytes(tables) - before - short) / n, (base + n) / t

    for rep in range(b.sizes.reps):
        per_step, rate = measured(
            lambda k: ours.run_in_process("bench-bigstate", {"n": k, "chunks": chunks})[1],
            list(ours.TABLES))
        ours_bytes.add(per_step)
        ours_rate.add(rate)
        per_step, rate = measured(lambda k: lg.run_big(k, chunks), lg.table_names())
        lg_bytes.add(per_step)
        lg_rate.add(rate)
        b.log(f"4 rep {rep + 1}: agentops {ours_bytes.values[-1] / 1024:.1f} KiB/step "
              f"{ours_rate.values[-1]:.0f} steps/s; LangGraph {lg_bytes.values[-1] / 1024:.1f} "
              f"KiB/step {lg_rate.values[-1]:.0f} steps/s")
    title = f"{chunks} KiB state, 1 KiB changes a step, {n} steps"
    change = Samples([1024.0] * len(ours_bytes.values))
    b.rows += [
        Row("4", title, "stored bytes/step", "B", ours_bytes, change, "the change (1 KiB)",
            10.0, False, "<= 10x the change"),
        Row("4", title, "stored bytes/step", "B", ours_bytes, lg_bytes, "LangGraph", None, False,
            "(info)"),
        Row("4", title, "steps/s", "/s", ours_rate, lg_rate, "LangGraph", None, True, "(info)"),
    ]


# --- scenario 5 ------------------------------------------------------------------------------
def resume(b: Bench) -> None:
    from bench.compare import ours

    by_size = {}
    dbos_by_size = {}
    dbos_total = {}
    for size in b.sizes.resume_sizes:
        t0 = time.perf_counter()
        crashed = ours.CrashedRun(size, 2 * size)
        b.log(f"5: wrote a crashed agentops run of {size:,} steps in "
              f"{time.perf_counter() - t0:.1f} s")
        dbos_crashed = None
        if size in b.sizes.dbos_resume_sizes:
            dbos_crashed = DbosCrashed(b.url, size, 2 * size)
            b.log(f"5: crashed a DBOS workflow, padded to {size:,} steps")
            dbos_by_size[size], dbos_total[size] = Samples(), Samples()
        by_size[size] = Samples()
        for rep in range(b.sizes.reps):
            by_size[size].add(crashed.resume() * 1e3)
            crashed.reset()
            msg = f"5 rep {rep + 1} at {size:,}: agentops {by_size[size].values[-1]:.2f} ms"
            if dbos_crashed is not None:
                entered, total = dbos_crashed.resume()
                dbos_by_size[size].add(entered * 1e3)
                dbos_total[size].add(total * 1e3)
                dbos_crashed.reset()
                msg += f", DBOS {entered * 1e3:.0f} ms (from recover(): {total * 1e3:.0f} ms)"
            b.log(msg)
        crashed.delete()
    first = b.sizes.resume_sizes[0]
    for size in b.sizes.resume_sizes:
        title = f"resume at {size:,} of {2 * size:,} steps"
        if size in dbos_by_size:
            b.rows.append(Row("5", title, "claim to first new effect", "ms", by_size[size],
                              dbos_by_size[size], "DBOS", 0.1, False, "<= 0.1x DBOS",
                              "DBOS: workflow entry after recovery to first new step "
                              f"(from recover() call: {dbos_total[size].median:.0f} ms)"))
        if size != first:
            b.rows.append(Row("5", title, "claim to first new effect", "ms", by_size[size],
                              by_size[first], f"agentops at {first:,}", 1.5, False,
                              f"flat: <= 1.5x at {first:,}"))
    b.extra["resume_ms"] = {str(k): v.as_dict() for k, v in by_size.items()}


class DbosCrashed:
    """A DBOS workflow killed with SIGKILL in a child process after 3 steps, its step log
    then padded to `done` steps (copies of a real step row), and reset after each recovery."""

    BLOCK_AT = 3

    def __init__(self, url: str, done: int, total: int):
        import os

        import psycopg

        from bench.compare import dbos_peer

        self.url, self.done = url, done
        self.id = dbos_peer.new_id("resume")
        env = dict(os.environ, BENCH_DBOS_BLOCK_AT=str(self.BLOCK_AT))
        child = subprocess.Popen([sys.executable, "-m", "bench.compare.dbos_peer", "crash", url,
                                  self.id, str(total)], env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            with psycopg.connect(url, autocommit=True) as conn:
                while True:
                    steps = conn.execute("SELECT count(*) FROM dbos.operation_outputs "
                                         "WHERE workflow_uuid = %s", [self.id]).fetchone()[0]
                    if steps >= self.BLOCK_AT:
                        break
                    if child.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the DBOS child did not reach its blocking step")
                    time.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("""
                INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name,
                    output, error, child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms,
                    serialization, application_name)
                SELECT workflow_uuid, g, function_name, output, error, child_workflow_id,
                       started_at_epoch_ms, completed_at_epoch_ms, serialization,
                       application_name
                FROM dbos.operation_outputs, generate_series(%s::int, %s::int) g
                WHERE workflow_uuid = %s AND function_id = 1""",
                         [self.BLOCK_AT + 1, done, self.id])
            conn.execute("ANALYZE dbos.operation_outputs")
            self.saved = conn.execute("SELECT row_to_json(w)::text FROM dbos.workflow_status w "
                                      "WHERE workflow_uuid = %s", [self.id]).fetchone()[0]

    def resume(self) -> tuple[float, float]:
        """(workflow entry to first new step, recover() call to first new step), seconds."""
        from dbos import DBOS

        from bench.compare import dbos_peer

        state = dbos_peer.RESUME
        state.update(entered=None, first_new=None, **{"from": self.done})
        state["stop"].set()
        start = time.perf_counter()
        handles = DBOS._recover_pending_workflows(["crashed"])
        if len(handles) != 1:
            raise RuntimeError(f"DBOS recovered {len(handles)} workflows, expected 1")
        handles[0].get_result(polling_interval_sec=0.05)
        if state["first_new"] is None:
            raise RuntimeError("the recovered DBOS workflow made no new step")
        return state["first_new"] - state["entered"], state["first_new"] - start

    def reset(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DELETE FROM dbos.operation_outputs WHERE workflow_uuid = %s "
                         "AND function_id > %s", [self.id, self.done])
            conn.execute("DELETE FROM dbos.workflow_output WHERE workflow_uuid = %s", [self.id])
            cols = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'dbos' "
                "AND table_name = 'workflow_status' AND column_name <> 'workflow_uuid'")]
            names = ", ".join(cols)
            conn.execute(f"UPDATE dbos.workflow_status SET ({names}) = (SELECT {names} FROM "
                         f"json_populate_record(NULL::dbos.workflow_status, %s::json)) "
                         f"WHERE workflow_uuid = %s", [self.saved, self.id])


# --- scenario 6 ------------------------------------------------------------------------------
def concurrency(b: Bench) -> None:
    import psutil
    import psycopg

    from bench.compare import ours
    from bench.compare.cluster import QCluster

    runs, window = b.sizes.active_runs, b.sizes.window
    steps = 1000
    o_rate, d_rate, o_prog, d_prog, o_rss, d_rss = (Samples() for _ in range(6))
    for rep in range(b.sizes.reps):
        cluster = QCluster(b.url)
        ids = []
        try:
            ids = ours.launch_many("bench-llm", {"n": steps, "seconds": 1.0}, runs)
            start = time.time()
            peak = _sample_rss(lambda: cluster.rss()["total"], window)
            end = time.time()
            done, progressed = ours.effects_between(ids, start, end)
        finally:
            cluster.stop()
            ours.abandon(ids)
        o_rate.add(done / (end - start))
        o_prog.add(progressed)
        o_rss.add(peak / 2**20)
        # DBOS: the same workload in a process of its own, so its memory is its own.
        child = subprocess.Popen([sys.executable, "-m", "bench.compare.dbos_peer", "llm", b.url,
                                  str(runs), str(steps), "1.0"], stdout=subprocess.PIPE,
                                 start_new_session=True)
        try:
            child.stdout.readline()  # "enqueued": every workflow started
            start = time.time()
            peak = _sample_rss(lambda: psutil.Process(child.pid).memory_info().rss, window)
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
                WHERE w.executor_id = 'llm' AND w.status = 'PENDING'""",
                                            [start * 1000, end * 1000, end * 1000]).fetchone()
            conn.execute("UPDATE dbos.workflow_status SET status = 'CANCELLED' "
                         "WHERE executor_id = 'llm' AND status IN ('PENDING', 'ENQUEUED')")
        d_rate.add(done / (end - start))
        d_prog.add(progressed)
        d_rss.add(peak / 2**20)
        b.log(f"6 rep {rep + 1}: agentops {o_rate.values[-1]:.1f} effects/s, "
              f"{o_prog.values[-1]:.0f}/{runs} runs progressed, {o_rss.values[-1]:.0f} MiB; "
              f"DBOS {d_rate.values[-1]:.1f} effects/s, {d_prog.values[-1]:.0f}/{runs}, "
              f"{d_rss.values[-1]:.0f} MiB")
    title = f"{runs:,} active runs, tool sleeps 1 s, {window:.0f} s window"
    b.rows += [
        Row("6", title, "effects/s", "/s", o_rate, d_rate, "DBOS", None, True, "(reported)",
            f"agentops: one qcluster of {b.extra.get('qcluster_workers', '?')} workers; "
            "DBOS: one process, a thread per workflow"),
        Row("6", title, "runs that progressed", "runs", o_prog, Samples([runs] * len(o_prog.values)),
            "all runs", 1.0, True, "all progress"),
        Row("6", title, "peak RSS of the worker(s)", "MiB", o_rss, d_rss, "DBOS", None, False,
            "(reported)", "agentops: qcluster main + sentinel + workers; DBOS: its one process"),
    ]


def _sample_rss(read, seconds: float) -> float:
    peak, end = 0.0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            peak = max(peak, read())
        except Exception:  # noqa: BLE001 - a process went away between samples
            pass
        time.sleep(0.5)
    return peak
