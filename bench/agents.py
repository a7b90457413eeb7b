"""The crawl agent with the engine against the same crawl without it.

    python -m bench.agents [--pages 10000] [--rounds 1]

Both crawls run in this process against one real Daphne serving the sandbox site
at zero latency, on a PostgreSQL database of their own (``agentops_bench_agents``,
dropped and migrated fresh; ``BENCH_AGENTS_DATABASE_URL`` overrides it):

- engine: the ``crawl`` agent launched as a run and executed by ``execute_run``
  with the ORM store, time slices and lease as configured, until it succeeds
  (every page fetch is a logged effect; checkpoints, events and lease renewals
  as in production; only the task queue between slices is left out);
- plain: the same agent code (``start`` and ``step``) in a loop, with a context
  whose ``call`` just calls the tool (retrying as its policy says): no log, no
  checkpoint, no lease.

Both must produce the same report. Prints pages/second for each and the
engine's overhead; the target is at most 25%.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.setup_db import setup_django

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench_agents"
TARGET_OVERHEAD = 0.25


class PlainContext:
    """What a step sees without the engine: calls go straight to the tools."""

    run_id, branch, is_replaying, suspended_for = "plain", 1, False, 0.0

    def __init__(self, step_no: int):
        self.step_no = step_no
        self._seq = 0

    def call(self, tool, *args, **kwargs):
        from runs.durable import ToolFailedError

        self._seq += 1
        if tool.idempotent:
            kwargs["idempotency_key"] = f"plain:{self.step_no}:{self._seq}"
        for attempt in range(1, tool.retry.attempts + 1):
            try:
                return tool.fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - as the engine: a failure is data
                if getattr(exc, "permanent", False) or type(exc).__name__ == \
                        "PermanentToolError" or attempt == tool.retry.attempts:
                    raise ToolFailedError(tool.name, type(exc).__name__, str(exc),
                                          attempt) from exc
                time.sleep(tool.retry.delay(attempt))

    def log(self, message):
        pass

    def progress(self, done, total, message=""):
        pass


def plain_crawl(inputs: dict) -> dict:
    from builtin_agents.agents import Crawl
    from runs.durable import Done

    agent = Crawl()
    state, step_no = agent.start(inputs), 0
    while True:
        step_no += 1
        result = agent.step(PlainContext(step_no), state)
        if isinstance(result, Done):
            return result.output
        state = result


def engine_crawl(inputs: dict) -> tuple[dict, dict]:
    from runs.config import worker_config
    from runs.durable import Outcome, control, execute_run
    from runs.models import Run
    from runs.store import OrmStore

    store = OrmStore()
    run = control.launch(store, agent="crawl", inputs=inputs)
    outcome, slices = Outcome.YIELDED, 0
    while outcome == Outcome.YIELDED:
        outcome = execute_run(store, run.id, worker_config())
        slices += 1
    row = Run.objects.get(pk=run.id)
    assert outcome == Outcome.SUCCEEDED, (outcome, row.error, row.attention)
    stats = {"slices": slices, "checkpoints": row.checkpoints.count(),
             "effects": row.effects.count(), "events": row.events.count()}
    return row.output, stats


def start_daphne(url: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="agentops.settings",
               PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "agentops.asgi:application"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("daphne did not start")
        time.sleep(0.1)


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1, help="plain/engine pairs (best kept)")
    args = parser.parse_args(argv)
    url = setup_django(os.environ.get("BENCH_AGENTS_DATABASE_URL", DEFAULT_URL))
    daphne, server = start_daphne(url)
    try:
        inputs = {"site_url": f"{server}/sandbox/site", "pages": args.pages, "latency_ms": 0,
                  "error_rate": 0.0}
        from builtin_agents.agents import Crawl
        from runs.durable import validate_inputs

        inputs = validate_inputs(Crawl, inputs)
        plain_crawl({**inputs, "pages": 200})  # warm up the server and the connection
        plain_times, engine_times = [], []
        for _ in range(args.rounds):
            plain_report, seconds = timed(plain_crawl, inputs)
            plain_times.append(seconds)
            (engine_report, stats), seconds = timed(engine_crawl, inputs)
            engine_times.append(seconds)
            assert engine_report == plain_report, "the two crawls disagree"
    finally:
        daphne.terminate()
        daphne.wait(10)
    pages = plain_report["fetches"]
    plain, engine = min(plain_times), min(engine_times)
    overhead = engine / plain - 1
    print(f"crawl of {args.pages} pages ({pages} fetched), zero latency, PostgreSQL, "
          f"batch {inputs['batch']}, one Daphne")
    print(f"plain loop : {plain:7.2f} s  {pages / plain:7.1f} pages/s")
    print(f"engine     : {engine:7.2f} s  {pages / engine:7.1f} pages/s  "
          f"({stats['effects']} effects, {stats['checkpoints']} checkpoints, "
          f"{stats['events']} events, {stats['slices']} slices)")
    print(f"ratio engine/plain: {engine / plain:.3f}  overhead {overhead:+.1%}  "
          f"(target <= {TARGET_OVERHEAD:.0%}): {'OK' if overhead <= TARGET_OVERHEAD else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
