"""Where agentops' time goes in the comparison's scenarios: statements and round trips
per unit of work, and a cProfile of the engine, in this process.

    python -m bench profile [effects|steps|small-runs|chat|resume|what-if|all] [--top N]

Statements are counted on psycopg itself (Django's cursors and the store's own
fast-path cursor alike); COMMIT and ROLLBACK count as round trips too.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time
from collections import Counter
from contextlib import contextmanager

from bench.setup_db import ROOT

SITE = str(ROOT / ".venv/lib/python3.11/site-packages") + "/"
COUNTS: Counter = Counter()
SAMPLES: dict = {}


@contextmanager
def counting():
    """Count statements by their first words, and COMMITs, while the block runs."""
    import psycopg

    originals = {}

    def wrap(cls, name, label=None):
        original = getattr(cls, name)
        originals[(cls, name)] = original

        def counted(self, *args, **kwargs):
            key = label or _kind(args[0] if args else kwargs.get("query", ""))
            COUNTS[key] += 1
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                SAMPLES.setdefault(key, []).append(time.perf_counter() - start)
        setattr(cls, name, counted)

    for cls in (psycopg.Cursor, psycopg.ClientCursor):
        for name in ("execute", "executemany"):
            if name in vars(cls):  # a subclass that inherits it is counted once, by its base
                wrap(cls, name)
    wrap(psycopg.Connection, "commit", "COMMIT")
    wrap(psycopg.Connection, "rollback", "ROLLBACK")
    COUNTS.clear()
    SAMPLES.clear()
    try:
        yield COUNTS
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)


def _kind(query) -> str:
    text = query.as_string(None) if hasattr(query, "as_string") else str(query)
    words = " ".join(text.split()[:6])
    if "SAVEPOINT" in words:
        return "RELEASE SAVEPOINT" if words.startswith("RELEASE") else "SAVEPOINT"
    if words.startswith("WITH run AS (UPDATE"):
        return "fast-path effect commit (WITH ... UPDATE/INSERT)"
    for table in ("runs_runevent", "runs_checkpoint", "runs_effect", "runs_auditentry",
                  "runs_run"):
        if f'"{table}"' in text or f" {table} " in text or f" {table}\n" in text:
            verb = text.split()[0].upper()
            return f"{verb} {table}"
    return words[:60]


def report(title: str, units: int, unit: str, elapsed: float, profile: cProfile.Profile,
           top: int) -> None:
    print(f"\n=== {title}: {elapsed / units * 1e3:.3f} ms per {unit} "
          f"({units} {unit}s in {elapsed:.2f} s) ===")
    total = sum(COUNTS.values()) + COUNTS["COMMIT"]
    print(f"round trips per {unit}: {total / units:.2f} (a COMMIT also means a BEGIN)")
    for key, count in COUNTS.most_common():
        times = SAMPLES.get(key, [])
        mean = sum(times) / len(times) * 1e3 if times else 0
        print(f"  {count / units:7.2f} x {mean:6.3f} ms  {key}")
    for order in ("cumulative", "tottime") if top else ():
        stream = io.StringIO()
        pstats.Stats(profile, stream=stream).sort_stats(order).print_stats(top)
        print(f"-- by {order}")
        print("\n".join(line.replace(str(ROOT) + "/", "").replace(SITE, "")
                        for line in stream.getvalue().splitlines()
                        if line.strip() and not line.startswith(("   Ordered", "   List"))))


def profile_effects(n: int, top: int) -> None:
    from bench.compare import ours

    ours.run_in_process("bench-effects", {"n": 10})  # warm up
    with counting():
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        ours.run_in_process("bench-effects", {"n": n})
        prof.disable()
        elapsed = time.perf_counter() - start
    report(f"scenario 1: one run of {n} no-op effects", n, "effect", elapsed, prof, top)


def profile_steps(n: int, top: int) -> None:
    from bench.compare import ours

    ours.run_in_process("bench-steps", {"n": 10})
    with counting():
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        ours.run_in_process("bench-steps", {"n": n})
        prof.disable()
        elapsed = time.perf_counter() - start
    report(f"scenario 1b: {n} steps of one effect, checkpoint every step", n, "step", elapsed,
           prof, top)


def profile_small_runs(n: int, top: int) -> None:
    """Scenario 2's engine part: launch (as run_launch does, without the queue) and what
    the worker task does with a run (execute_run on the ORM store), in this process."""
    from django.db import transaction

    from runs.durable import control, execute_run
    from runs.storage import database_store
    from runs.worker.config import worker_config

    with counting():
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        ids = []
        for _ in range(n):
            with transaction.atomic():
                ids.append(control.launch(database_store(), agent="bench-effects",
                                          inputs={"n": 5}).id)
        launched = time.perf_counter()
        for run_id in ids:
            assert execute_run(database_store(), run_id, worker_config()) == "succeeded"
        prof.disable()
        elapsed = time.perf_counter() - start
    print(f"\nlaunch: {(launched - start) / n * 1e3:.2f} ms a run; "
          f"execute_run: {(elapsed - (launched - start)) / n * 1e3:.2f} ms a run")
    report(f"scenario 2 (engine only): {n} runs of 5 effects, launch + worker task", n, "run",
           elapsed, prof, top)


def profile_chat(n: int, top: int) -> None:
    """Scenario 3: agentops' chat agent, then LangGraph's graph (round trips only)."""
    from bench.compare import ours
    from bench.compare.langgraph_peer import LangGraphPeer
    from bench.compare.runner import URL

    ours.run_in_process("bench-chat", {"n": 5})
    with counting():
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        ours.run_in_process("bench-chat", {"n": n})
        prof.disable()
        elapsed = time.perf_counter() - start
    report(f"scenario 3: agentops, chat of {n} steps, checkpoint every step", n, "step",
           elapsed, prof, top)
    lg = LangGraphPeer(os.environ.get("BENCH_COMPARE_URL", URL))
    try:
        lg.run_chat(5)
        with counting():
            prof = cProfile.Profile()
            prof.enable()
            elapsed = lg.run_chat(n)
            prof.disable()
        report(f"scenario 3: LangGraph PostgresSaver, durability=sync, {n} steps", n, "step",
               elapsed, prof, 0)
    finally:
        lg.close()


def profile_resume(size: int, top: int) -> None:
    from bench.compare import ours

    crashed = ours.CrashedRun(size, 2 * size)
    crashed.resume()
    crashed.reset()
    with counting():
        prof = cProfile.Profile()
        prof.enable()
        elapsed = crashed.resume()
        prof.disable()
    report(f"scenario 5: resume at {size} of {2 * size} steps (claim to first new effect)", 1,
           "resume", elapsed, prof, top)
    crashed.delete()


def _what_if() -> None:
    from bench.compare import whatif

    print("\n=== what-if: today's store calls against one-statement prototypes ===")
    whatif.main()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench profile")
    parser.add_argument("what", nargs="?", default="all",
                        choices=["effects", "steps", "small-runs", "chat", "resume", "what-if", "all"])
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)

    from bench.compare.runner import URL
    from bench.setup_db import setup_django

    os.environ.pop("REDIS_URL", None)
    setup_django(os.environ.get("BENCH_COMPARE_URL", URL), fresh=True)
    from bench.compare import agents  # noqa: F401

    todo = {"effects": lambda: profile_effects(1000, args.top),
            "steps": lambda: profile_steps(1000, args.top),
            "small-runs": lambda: profile_small_runs(200, args.top),
            "chat": lambda: profile_chat(200, args.top),
            "resume": lambda: profile_resume(5000, args.top),
            "what-if": _what_if}
    for name, fn in todo.items():
        if args.what in (name, "all"):
            fn()
    return 0
