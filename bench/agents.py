"""Agents on the engine: its overhead on a crawl, parallel fetches, streamed answers.

    python -m bench.agents [--only overhead,concurrency,stream] [--pages 10000] [--rounds 1]
    python -m bench.agents adapters [--runs 20] [--latency-ms 20]   (the SDK adapters: below)

Three questions, each against a baseline run in the same process:

overhead (below): the crawl agent with the engine against the same crawl without it.

concurrency: the crawl at 20 ms a page, its batches (the crawl's default size) fetched
with ctx.map at max_concurrency 1 (the baseline: one page at a time, as before ctx.map)
and 8, and at 8 with batches of 40 (a step ends with its slowest page: the shorter
the step, the more its end costs), on the engine with the store and connection pool
of a worker process, the site served by bench/site_server.py (a remote site's CPU is
not on the crawler's machine: see there); pages/s of each and the ratio (target: at
least 6x).

stream: a streaming tool's chunks, from their arrival at the worker (the moment the
tool yields one, as the LLM tool does when a server-sent event arrives) to their
arrival at a websocket client on the run page's socket (the browser's side of the
protocol), through real Daphne and Redis, batched as in production (every
streaming.FLUSH_SECONDS); p50/p95 (target p95 < 150 ms with Redis). Baselines in
the same run: the same chunks unbatched (a commit per chunk), and the socket's ping
→ pong round trip. Needs REDIS_URL.

The overhead question:

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

from bench.agents_adapters import DEFAULT_URL, main_adapters
from bench.setup_db import setup_django

ROOT = Path(__file__).resolve().parents[1]
TARGET_OVERHEAD = 0.25
SHORT_BATCH = 40  # the concurrency question's second shape


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
                if wait is None:  # permanent as the engine says it (a 404 page)
                    raise ToolFailedError(tool.name, type(exc).__name__, str(exc), attempt,
                                          permanent=not retryable(exc, idempotent=True)) \
                        from exc
                time.sleep(wait)

    def map(self, tool, items, *, max_concurrency=8, return_exceptions=False):
        """As ctx.map, without the engine: the calls at once, results in order."""
        from concurrent.futures import ThreadPoolExecutor

        from runs.durable import ToolFailedError

        def one(item):
            try:
                return self.call(tool, item)
            except ToolFailedError as exc:
                if not return_exceptions:
                    raise
                return exc

        with ThreadPoolExecutor(max_workers=max_concurrency) as pool:
            return list(pool.map(one, items))

    def log(self, message):
        pass

    def progress(self, done, total, message=""):
        pass


class PlainCrawl:
    """The crawl agent's own start/step in a loop, a few seconds at a time."""

    def __init__(self, inputs: dict):
        from builtin_agents.crawl import Crawl

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

    def __init__(self, inputs: dict, store=None):
        from runs.durable import control
        from runs.storage import database_store

        self.store = store or database_store()
        self.run_id = control.launch(self.store, agent="crawl", inputs=inputs).id
        self.output, self.seconds, self.slices = None, 0.0, 0

    def run_slice(self) -> None:
        from runs.durable import Outcome, execute_run
        from runs.models import Run
        from runs.worker.config import worker_config

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
    deadline = time.monotonic() + 120  # a loaded machine starts Daphne slowly
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("daphne did not start")
        time.sleep(0.1)


def start_site(url: str) -> tuple[subprocess.Popen, str]:
    """The sandbox's site on a lean server of its own (bench/site_server.py: why)."""
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="agentops.settings",
               PYTHONPATH=str(ROOT), AGENTOPS_DB_POOL="1")
    proc = subprocess.Popen([sys.executable, "-m", "bench.site_server"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    server = proc.stdout.readline().strip()
    if not server:
        raise SystemExit("the site server did not start")
    return proc, server


def stop_site(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(60)


def stop_daphne(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)  # a loaded machine stops it slowly
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["adapters"]:
        return main_adapters(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="overhead,concurrency,stream")
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved plain/engine pairs (median ratio)")
    parser.add_argument("--concurrency-pages", type=int, default=800)
    parser.add_argument("--chunks", type=int, default=400, help="stream: chunks per mode")
    args = parser.parse_args(argv)
    url = setup_django(os.environ.get("BENCH_AGENTS_DATABASE_URL", DEFAULT_URL))
    questions = [q for q in args.only.split(",") if q]
    if "overhead" in questions:
        overhead(url, args)
    if "concurrency" in questions:
        concurrency(url, args.concurrency_pages)
    if "stream" in questions:
        from bench.agents_stream import stream_latency

        stream_latency(args.chunks)
    return 0


def concurrency(url: str, pages: int) -> None:
    """Crawl pages/s at max_concurrency 1 and 8, 20 ms a page, the crawl's own batch;
    and at 8 with batches of 40, to show what the step's shape costs."""
    from builtin_agents.crawl import Crawl
    from runs.durable import validate_inputs
    from runs.worker.db import use_pool_in_this_process
    from runs.worker.execute import store

    # As a worker process runs: a pool of connections, each call of the store
    # handing its connection back (the threads of ctx.map connect to nothing).
    use_pool_in_this_process()
    site, server = start_site(url)
    # (max_concurrency, batch): None is the crawl's default batch
    shapes = [(1, None), (8, None), (8, SHORT_BATCH)]
    results = {}
    try:
        for _ in range(2):  # taking turns, so that every shape meets the same load
            for limit, batch in shapes:
                given = {"site_url": f"{server}/sandbox/site", "pages": pages,
                         "latency_ms": 20, "error_rate": 0.0, "concurrency": limit}
                if batch is not None:
                    given["batch"] = batch
                inputs = validate_inputs(Crawl, given)
                crawl = EngineCrawl(inputs, store())
                while crawl.output is None:
                    crawl.run_slice()
                results.setdefault((limit, batch), []).append(
                    (crawl.output["fetches"], crawl.seconds))
    finally:
        stop_site(site)
    default_batch = validate_inputs(Crawl, {})["batch"]
    print(f"\ncrawl of {pages} pages at 20 ms a page, batches of {default_batch} (the crawl's "
          "default), ctx.map, PostgreSQL, the site on bench/site_server.py; each shape "
          "twice, taking turns")
    rates = {}
    for (limit, batch), runs in results.items():
        seconds = sum(t for _, t in runs)
        rates[limit, batch] = sum(f for f, _ in runs) / seconds
        label = ("baseline, one at a time" if limit == 1 else "ctx.map") if batch is None \
            else f"ctx.map, batches of {batch}"
        print(f"max_concurrency {limit}: {seconds / len(runs):7.2f} s a crawl  "
              f"{rates[limit, batch]:7.1f} pages/s  ({label})")
    ratio = rates[8, None] / rates[1, None]
    print(f"ratio 8/1: {ratio:.2f}x  (target >= 6x): {'OK' if ratio >= 6 else 'UNDER'}")
    # A step ends when its slowest page is in, so slots stand idle at every step's end:
    # the fewer rounds of 8 a step has, the larger that share.
    print(f"with batches of {SHORT_BATCH} ({SHORT_BATCH // 8} rounds of 8 a step) against the "
          f"same baseline: {rates[8, SHORT_BATCH] / rates[1, None]:.2f}x")


def overhead(url: str, args) -> None:
    daphne, server = start_daphne(url)
    try:
        inputs = {"site_url": f"{server}/sandbox/site", "pages": args.pages, "latency_ms": 0,
                  "error_rate": 0.0}
        from builtin_agents.crawl import Crawl
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
        stop_daphne(daphne)
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


if __name__ == "__main__":
    sys.exit(main())
