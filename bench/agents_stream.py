"""The stream question of bench/agents.py: a streamed chunk, from the worker to the page.

A run of `bench_stream` executes in this process (execute_run, the ORM store with the
worker's notify_run): its one call is a streaming tool that yields a chunk every
CHUNK_GAP seconds, the pace of a model streaming tokens, stamping each as it yields
it. A websocket client here, on the run page's socket of a real Daphne (with Redis,
as deployed), stamps each chunk as its `stream` event arrives. Latency = arrival -
yield, per chunk. Modes, in one process, taking turns: batched (FLUSH_SECONDS, as in
production) and unbatched (a commit per chunk: the lowest latency the pipeline has,
at a row per chunk).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from bench.live_common import bench_user_cookie, open_socket, percentile, summary

CHUNK_GAP = 0.02  # 50 chunks a second: a fast model
TARGET_P95_MS = 150
MARK = re.compile(r"<(\d+)>")
STAMPS: dict[int, float] = {}


async def ping_rtts(socket, count: int) -> list[float]:
    """The socket's floor: a ping → pong round trip, in ms (as bench/live_latency.py)."""
    rtts = []
    for _ in range(count):
        start = time.perf_counter()
        await socket.send('{"type": "ping"}')
        while json.loads(await socket.recv())["type"] != "pong":
            pass
        rtts.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.005)
    return rtts


def _registry():
    from runs.durable import AgentRegistry, agent, tool

    registry = AgentRegistry()

    @tool(idempotent=True, stream=True, name="bench.tokens")
    def tokens(count: int, *, idempotency_key: str):
        for n in range(count):
            time.sleep(CHUNK_GAP)
            STAMPS[n] = time.perf_counter()
            yield f"<{n}>"
        return {"chunks": count}

    @agent("bench_stream", registry=registry)
    def bench_stream(ctx, inputs):
        return ctx.call(tokens, inputs["count"])

    return registry


async def _measure(port: int, run_id: str, cookie: str, count: int, registry, flush: float):
    from runs.durable import execute_run, streaming
    from runs.models import Run
    from runs.storage.orm import OrmStore
    from runs.wakeups import notify_run
    from runs.worker.config import worker_config

    head = await asyncio.to_thread(lambda: Run.objects.get(pk=run_id).event_seq)
    socket = await open_socket(port, run_id, cookie, after=head)
    rtts = await ping_rtts(socket, 50)
    STAMPS.clear()
    arrivals: dict[int, float] = {}
    streaming.FLUSH_SECONDS = flush
    outcome = {}

    def work():
        from django.db import connection

        try:
            outcome["value"] = execute_run(OrmStore(notify=notify_run), run_id,
                                           worker_config(600), registry=registry)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    events = 0
    try:
        while len(arrivals) < count:
            message = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
            now = time.perf_counter()
            for event in message.get("events", []):
                if event["kind"] == "stream":
                    events += 1
                    for n in MARK.findall(event["data"]["text"]):
                        arrivals.setdefault(int(n), now)
    finally:
        thread.join()
        await socket.close()
    assert outcome.get("value") == "succeeded", outcome
    latencies = [(arrivals[n] - STAMPS[n]) * 1000 for n in range(count)]
    return latencies, rtts, events


def stream_latency(count: int) -> None:
    from runs.durable import control, streaming
    from runs.storage.orm import OrmStore
    from tests.support.processes import Server

    if not os.environ.get("REDIS_URL"):
        print("\nstream: skipped (set REDIS_URL)")
        return
    registry = _registry()
    user, cookie = bench_user_cookie()
    production = streaming.FLUSH_SECONDS
    server = Server(Path(tempfile.mkdtemp(prefix="bench-stream-")), AGENTOPS_DB_POOL="1",
                    REDIS_URL=os.environ["REDIS_URL"])
    results: dict[str, list] = {"batched": [], "unbatched": []}
    rtts_all, rows = [], {"batched": 0, "unbatched": 0}
    try:
        for mode in ("batched", "unbatched", "batched", "unbatched"):  # taking turns
            run = control.launch(OrmStore(), agent="bench_stream", inputs={"count": count // 2},
                                 owner=str(user.pk), registry=registry)
            flush = production if mode == "batched" else 0.0
            latencies, rtts, events = asyncio.run(
                _measure(server.port, run.id, cookie, count // 2, registry, flush))
            results[mode] += latencies
            rtts_all += rtts
            rows[mode] += events
    finally:
        streaming.FLUSH_SECONDS = production
        server.stop()
    print(f"\nstreamed chunks, yield at the worker → arrival at the run page's socket: "
          f"{count} chunks a mode, one every {CHUNK_GAP * 1000:.0f} ms, Daphne + Redis, "
          f"PostgreSQL")
    batched, unbatched = results["batched"], results["unbatched"]
    print(f"batched every {production * 1000:.0f} ms : {summary(batched)}  "
          f"({rows['batched']} event rows)")
    print(f"baseline, unbatched : {summary(unbatched)}  ({rows['unbatched']} event rows)")
    print(f"baseline ping→pong  : {summary(rtts_all)}")
    p95 = percentile(batched, 95)
    print(f"ratio batched/unbatched: p50 ×{percentile(batched, 50) / percentile(unbatched, 50):.1f}"
          f"  p95 ×{p95 / percentile(unbatched, 95):.1f}; rows ×"
          f"{rows['batched'] / max(1, rows['unbatched']):.2f}")
    print(f"target p95 < {TARGET_P95_MS} ms: {'met' if p95 < TARGET_P95_MS else 'MISSED'}")
