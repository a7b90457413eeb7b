"""The SDK adapters' question of `python -m bench.agents` (bench/agents.py says how it
runs and where its database is): an SDK agent through runs.adapters against the same
agent run plainly."""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

from bench.setup_db import execute_to_end, setup_django

# bench/agents.py's questions use the same database
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench_agents"

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
    # The store and settings the workers use, but for the codes a worker advertises: those
    # are the global registry's, and these agents are in the bench's own (without it every
    # claim was refused, "not_claimed").
    store, config = database_store(), dataclasses.replace(worker_config(), codes=None)
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
            outcome = execute_to_end(store, run.id, config, registry)
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
