"""agentops against DBOS Transact and LangGraph's PostgresSaver, side by side.

    pip install -e '.[bench]'
    python -m bench compare [--quick] [--only 1,3]

Every scenario of issue 7 runs agentops and its peer alternately, sample by
sample, against one PostgreSQL database (schemas `public`, `dbos`, `langgraph`),
with the raw one-row INSERT + COMMIT floor measured in the same run. The table
is printed and written to bench/results/compare.json and compare.png.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
import traceback
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
SCENARIOS = ("1", "2", "3", "4", "5", "6")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and smaller sizes (about 4 minutes)")
    parser.add_argument("--only", default=",".join(SCENARIOS),
                        help="comma-separated scenarios to run (default: all)")
    parser.add_argument("--url", default=os.environ.get("BENCH_COMPARE_URL"),
                        help="PostgreSQL database to (re)create for the run")
    parser.add_argument("--out", default=str(RESULTS / "compare"),
                        help="path of the results without extension (.json and .png)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]

    from bench.compare import runner
    from bench.setup_db import setup_django

    os.environ.pop("REDIS_URL", None)  # no channel layer: the bench measures the engine
    url = setup_django(args.url or runner.URL, fresh=True)
    started = time.time()
    from bench.compare import agents, report, resume, scenarios
    from bench.compare.langgraph_peer import LangGraphPeer

    assert agents.Effects  # imported for its @agent registrations

    b = runner.Bench(url=url, sizes=runner.Sizes.for_mode(args.quick))
    b.log(f"database {url}; {'quick' if args.quick else 'full'} run, "
          f"{b.sizes.reps} alternating repetitions; scenarios {', '.join(only)}")
    lg = LangGraphPeer(url)
    b.on_recover.append(lg.reopen)
    errors = {}
    steps = {"1": lambda: scenarios.durable_steps(b), "2": lambda: scenarios.many_small_runs(b),
             "3": lambda: scenarios.growing_state(b, lg), "4": lambda: scenarios.large_state(b, lg),
             "5": lambda: resume.resume(b), "6": lambda: scenarios.concurrency(b)}
    load = [os.getloadavg()[0]]
    try:
        for scenario in only:
            t0 = time.monotonic()
            try:
                steps[scenario]()
            except Exception:  # noqa: BLE001 - one scenario's failure must not hide the rest
                errors[scenario] = traceback.format_exc()
                b.log(f"scenario {scenario} FAILED:\n{errors[scenario]}")
            b.log(f"scenario {scenario} took {time.monotonic() - t0:.0f} s")
            load.append(os.getloadavg()[0])
    finally:
        lg.close()
    if not b.floor.values:  # scenario 1 did not run: measure the floor on its own
        from bench.setup_db import raw_insert_floor

        floor = b.repeat("floor", lambda _: ({"floor": raw_insert_floor(url, b.sizes.floor_rows)},
                                             "raw floor measured"))
        b.floor.values += floor["floor"].values
    meta = {"machine": machine(url), "quick": args.quick, "scenarios": only,
            "repetitions": b.sizes.reps, "sizes": vars(b.sizes),
            "raw_floor_ms": {k: (v * 1e3 if isinstance(v, float) else v)
                             for k, v in b.floor.as_dict().items() if k != "samples"},
            "raw_floor_ms_samples": [v * 1e3 for v in b.floor.values],
            "load_average_1m": load, "seconds": round(time.time() - started, 1),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "extra": b.extra, "errors": errors}
    print()
    floor = b.floor
    print(f"raw floor (one-row INSERT + COMMIT, psycopg 3, autocommit), same run: "
          f"{floor.median * 1e3:.3f} ms/row [{min(floor.values) * 1e3:.3f}-"
          f"{max(floor.values) * 1e3:.3f}]")
    print(report.table(b.rows))
    out = Path(args.out)
    report.write_json(out.with_suffix(".json"), b.rows, meta)
    report.write_png(out.with_suffix(".png"), b.rows, meta)
    m = meta["machine"]
    print(f"\nmachine: {m['nproc']} cores, {m['cpu']}, {m['postgres']}; load average "
          f"{' -> '.join(f'{x:.1f}' for x in load)}; {meta['seconds']:.0f} s")
    print(f"written: {out.with_suffix('.json')}, {out.with_suffix('.png')}")
    if errors:
        print(f"FAILED scenarios: {', '.join(errors)}")
    return 1 if errors else 0


def machine(url: str) -> dict:
    import psycopg

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    with psycopg.connect(url) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
    versions = {}
    for name in ("dbos", "langgraph", "langgraph-checkpoint-postgres", "django", "django-q2",
                 "psycopg"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = _git("rev-parse", "--short", "HEAD")
    changed = _git("status", "--porcelain", "--", "runs", "agentops")
    return {"nproc": os.cpu_count(), "cpu": cpu, "postgres": f"PostgreSQL {pg}",
            "python": platform.python_version(), "packages": versions, "commit": commit,
            "engine_files_changed_since_commit": changed.splitlines(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                              cwd=RESULTS.parent.parent).stdout.strip()
    except OSError:
        return ""
