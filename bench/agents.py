"""The crawl agent with the engine against the same crawl without it.

    python -m bench.agents [--pages 10000] [--rounds 1]

Both crawls run in this process against one real Daphne serving the sandbox site
at zero latency (with a connection pool, as the Procfile runs it), on a PostgreSQL
database of their own (``agentops_bench_agents``,
dropped and migrated fresh; ``BENCH_AGENTS_DATABASE_URL`` overrides it):

- engine: the ``crawl`` agent launched as a run and executed by ``execute_run``
  with the ORM store, time slices and lease as configured, until it succeeds
  (every page fetch is a logged effect; checkpoints, events and lease renewals
  as in production; only the task queue between slices is left out);
- plain: the same agent code (``start`` and ``step``) in a loop, with a context
  whose ``call`` just calls the tool (retrying as its policy says): no log, no
  checkpoint, no lease.

The two crawls take turns (an engine time slice, then as long of the plain loop),
so that on a shared machine both meet the same load; each is timed on its own
turns. Both must produce the same report. Prints pages/second for each and the
engine's overhead; the target is at most 25%. ``--rounds N``: the median of N.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
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
        from runs.durable.retry import retry_after, retryable

        self._seq += 1
        if tool.idempotent:
            kwargs["idempotency_key"] = f"plain:{self.step_no}:{self._seq}"
        started, attempt = time.time(), 0
        while True:
            attempt += 1
            try:
                return tool.fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - as the engine: a failure is data
                wait = tool.retry.next_wait(attempt, first_at=started, now=time.time(),
                                            key=kwargs.get("idempotency_key", ""),
                                            retry_after=retry_after(exc)) \
                    if retryable(exc, idempotent=tool.idempotent) else None
                if wait is None:
                    raise ToolFailedError(tool.name, type(exc).__name__, str(exc),
                                          attempt) from exc
                time.sleep(wait)

    def log(self, message):
        pass

    def progress(self, done, total, message=""):
        pass


class PlainCrawl:
    """The crawl agent's own start/step in a loop, a few seconds at a time."""

    def __init__(self, inputs: dict):
        from builtin_agents.agents import Crawl

        self.agent = Crawl()
        self.state, self.step_no = self.agent.start(inputs), 0
        self.output, self.seconds = None, 0.0

    def run_for(self, seconds: float) -> None:
        from runs.durable import Done

        start = time.perf_counter()
        while self.output is None and time.perf_counter() - start < seconds:
            self.step_no += 1
            result = self.agent.step(PlainContext(self.step_no), self.state)
            if isinstance(result, Done):
                self.output = result.output
            else:
                self.state = result
        self.seconds += time.perf_counter() - start


class EngineCrawl:
    """The crawl as a run, one time slice of ``execute_run`` at a time."""

    def __init__(self, inputs: dict):
        from runs.durable import control
        from runs.store import OrmStore

        self.store = OrmStore()
        self.run_id = control.launch(self.store, agent="crawl", inputs=inputs).id
        self.output, self.seconds, self.slices = None, 0.0, 0

    def run_slice(self) -> None:
        from runs.config import worker_config
        from runs.durable import Outcome, execute_run
        from runs.models import Run

        start = time.perf_counter()
        outcome = execute_run(self.store, self.run_id, worker_config())
        self.seconds += time.perf_counter() - start
        self.slices += 1
        if outcome != Outcome.YIELDED:
            row = Run.objects.get(pk=self.run_id)
            assert outcome == Outcome.SUCCEEDED, (outcome, row.error, row.attention)
            self.output = row.output

    def stats(self) -> dict:
        from runs.models import Run

        row = Run.objects.get(pk=self.run_id)
        return {"slices": self.slices, "checkpoints": row.checkpoints.count(),
                "effects": row.effects.count(), "events": row.events.count()}


def interleaved(inputs: dict) -> tuple[PlainCrawl, EngineCrawl]:
    """Both crawls, taking turns: an engine time slice, then as long of the plain loop.
    Over the same minutes, both meet the same load on a shared machine."""
    plain, engine = PlainCrawl(inputs), EngineCrawl(inputs)
    while plain.output is None or engine.output is None:
        before = engine.seconds
        if engine.output is None:
            engine.run_slice()
        if plain.output is None:
            plain.run_for(max(engine.seconds - before, 1.0))
    return plain, engine


def start_daphne(url: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # As the Procfile's web line: a connection pool, not a connection per request.
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="agentops.settings",
               PYTHONPATH=str(ROOT), AGENTOPS_DB_POOL="1")
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved plain/engine pairs (median ratio)")
    args = parser.parse_args(argv)
    url = setup_django(os.environ.get("BENCH_AGENTS_DATABASE_URL", DEFAULT_URL))
    daphne, server = start_daphne(url)
    try:
        inputs = {"site_url": f"{server}/sandbox/site", "pages": args.pages, "latency_ms": 0,
                  "error_rate": 0.0}
        from builtin_agents.agents import Crawl
        from runs.durable import validate_inputs

        inputs = validate_inputs(Crawl, inputs)
        warm_up = PlainCrawl({**inputs, "pages": 200})  # the server and the connection
        warm_up.run_for(600)
        rounds = []
        for _ in range(args.rounds):
            plain, engine = interleaved(inputs)
            assert engine.output == plain.output, "the two crawls disagree"
            rounds.append((plain, engine, engine.stats()))
    finally:
        daphne.terminate()
        daphne.wait(10)
    pages = rounds[0][0].output["fetches"]
    print(f"crawl of {args.pages} pages ({pages} fetched), zero latency, PostgreSQL, "
          f"batch {inputs['batch']}, one Daphne; the two crawls interleaved")
    for plain, engine, stats in rounds:
        print(f"plain loop : {plain.seconds:7.2f} s  {pages / plain.seconds:7.1f} pages/s")
        print(f"engine     : {engine.seconds:7.2f} s  {pages / engine.seconds:7.1f} pages/s  "
              f"({stats['effects']} effects, {stats['checkpoints']} checkpoints, "
              f"{stats['events']} events, {stats['slices']} slices)")
    ratio = statistics.median(engine.seconds / plain.seconds for plain, engine, _ in rounds)
    overhead = ratio - 1
    print(f"ratio engine/plain: {ratio:.3f}{' (median)' if len(rounds) > 1 else ''}  "
          f"overhead {overhead:+.1%}  (target <= {TARGET_OVERHEAD:.0%}): "
          f"{'OK' if overhead <= TARGET_OVERHEAD else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
