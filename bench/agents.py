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

from bench.setup_db import setup_django

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench_agents"
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


# --- the SDK adapters: an SDK agent through runs.adapters against the same agent run plainly ---
#
#     python -m bench.agents adapters [--runs 20] [--latency-ms 20]
#
# Each adapter's test agent (tests/adapter_agents.py: three tools, a prompt and a follow-up,
# eight model calls a run) against the sandbox's scripted model behind an in-process
# transport that answers after --latency-ms, as a hosted model would: once through the
# engine (a run launched and executed on the workers' store, every model call and tool call a
# logged effect, checkpoints and events as in production), once plainly by its SDK (no
# durability), taking turns run by run. Both must give the same answer. Target: at most
# 25% overhead at 20 ms. The durable adapter streams its model requests (their text is on
# the run page as it is written), so the plain baseline streams them too (what a live view
# needs without agentops); the plain run without streaming is printed beside it, since
# streaming costs the SDK itself a few ms a request (its events, a chunk a token).
ADAPTER_TARGET = 0.25


def _latency_transport(latency: float):
    import asyncio

    import httpx

    from tests.adapter_agents import scripted

    async def answer(request):
        await asyncio.sleep(latency)
        return scripted(request)

    return httpx.MockTransport(answer)


def _adapter_pair(name: str, latency: float):
    """(plain coroutine function, registry with the durable agent) over one transport."""
    from runs.adapters import openai_agents, pydantic_ai
    from runs.durable import AgentRegistry
    from tests import adapter_agents as agents

    transport = _latency_transport(latency)
    build, plain, wrap, option = {
        "pydantic_ai": (agents.build_pydantic, agents.plain_pydantic, pydantic_ai.durable, "deps"),
        "openai_agents": (agents.build_openai, agents.plain_openai, openai_agents.durable,
                          "context"),
    }[name]
    registry = AgentRegistry()
    wrap(build("http://scripted/v1", transport), name=name, version="1",
         input_schema=agents.SCHEMA, registry=registry, **{option: agents.deps})
    return build("http://scripted/v1", transport), plain, registry


class _Records:
    """The records API in memory for both: the bench measures the agents, not a server."""

    def __init__(self):
        self.by_key = {}

    def post(self, url, *, json, headers, timeout):
        import httpx

        record = self.by_key.setdefault(headers["Idempotency-Key"], {"id": len(self.by_key)})
        return httpx.Response(201, json=record, request=httpx.Request("POST", url))


def bench_adapters(runs: int, latency_ms: float) -> list[dict]:
    import asyncio

    from runs.durable import Outcome, control, execute_run
    from runs.models import Effect, Run
    from runs.storage import database_store
    from runs.worker.config import worker_config
    from tests import adapter_agents as agents

    agents.POST = _Records().post
    store, config = database_store(), worker_config()  # the store the workers use
    inputs = {"prompt": "Which pages mention a boat?", "follow_ups": ["And the old city?"],
              "delay": 0.0}
    figures = []
    for name in ("pydantic_ai", "openai_agents"):
        sdk_agent, plain, registry = _adapter_pair(name, latency_ms / 1000)
        asyncio.run(plain(sdk_agent, inputs))  # warm up: imports, clients, the database
        warm = control.launch(store, agent=name, inputs=inputs, registry=registry)
        execute_run(store, warm.id, config, registry=registry)
        plain_s, unstreamed_s, engine_s, answers, run_ids = [], [], [], set(), []
        for _ in range(runs):
            start = time.perf_counter()
            answers.add(asyncio.run(plain(sdk_agent, inputs, streamed=True)))
            plain_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            answers.add(asyncio.run(plain(sdk_agent, inputs)))
            unstreamed_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            run = control.launch(store, agent=name, inputs=inputs, registry=registry)
            while (outcome := execute_run(store, run.id, config, registry=registry)) \
                    == Outcome.YIELDED:
                pass
            engine_s.append(time.perf_counter() - start)
            assert outcome == Outcome.SUCCEEDED, (outcome, Run.objects.get(pk=run.id).error)
            answers.add(Run.objects.get(pk=run.id).output["answer"])
            run_ids.append(run.id)
        assert len(answers) == 1, f"{name}: the durable and the plain runs disagree: {answers}"
        effects = Effect.objects.filter(run_id=run_ids[0]).count()
        figures.append({"adapter": name, "plain": statistics.median(plain_s),
                        "unstreamed": statistics.median(unstreamed_s),
                        "engine": statistics.median(engine_s), "effects": effects})
    return figures


def main_adapters(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents adapters",
                                     description="SDK adapters against their SDKs run plainly")
    # 20: a plain run's time varies by 10-20% from one to the next on a shared VM; the
    # median of 10 moved the figure by several points between two runs of the bench.
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    url = setup_django(os.environ.get("BENCH_AGENTS_DATABASE_URL", DEFAULT_URL))
    figures = bench_adapters(args.runs, args.latency_ms)
    from bench.setup_db import raw_insert_floor

    floor = raw_insert_floor(url, rows=200) if url.startswith("postgres") else None
    print(f"SDK agents, 2 prompts, 8 model calls and 6 tool calls a run, model latency "
          f"{args.latency_ms:g} ms, {'PostgreSQL' if url.startswith('postgres') else url}; "
          f"median of {args.runs} runs each, durable and plain taking turns")
    worst = 0.0
    for f in figures:
        overhead = f["engine"] / f["plain"] - 1
        worst = max(worst, overhead)
        print(f"{f['adapter']:14s} plain {f['plain'] * 1000:7.1f} ms   durable "
              f"{f['engine'] * 1000:7.1f} ms  ({f['effects']} effects)   overhead "
              f"{overhead:+.1%}  (target <= {ADAPTER_TARGET:.0%}): "
              f"{'OK' if overhead <= ADAPTER_TARGET else 'OVER'}   "
              f"[plain, not streamed: {f['unstreamed'] * 1000:.1f} ms]")
    if floor is not None:
        # What the overhead is made of: a durable run writes each effect in a commit of
        # its own; on a loaded machine a commit costs many times its idle floor.
        print(f"one-row INSERT + COMMIT on this database now: {floor * 1000:.2f} ms "
              f"(the durable run's commits: about its effects + 6)")
    return 0


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
