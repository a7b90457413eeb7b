"""The HTTP API under load: launches per second through POST /api/v1/runs with 8
concurrent clients, and the time from an event's COMMIT to its arrival at an SSE
client (GET /api/v1/runs/{id}/events/stream), against the run page's websocket on the
same run at the same time.

One real Daphne on a fresh PostgreSQL database. Launch baseline, same process: the
same launches through runs.services.run_launch in 8 threads (no HTTP). Latency
baseline: a websocket client of the run page (runs/live/consumers.py), which the SSE
stream follows the same way (the LiveHub), receiving the very same commits.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/api.py [--launches 400]

Target (issue 17): SSE p95 within 1.5x of the websocket's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from live_common import (
    bench_user_cookie,
    create_runs,
    open_socket,
    percentile,
    setup_django,
    summary,
)
from live_latency import writer

DB_NAME = "agentops_api_bench"
CLIENTS = 8


def launches_over_http(url: str, token: str, total: int) -> float:
    from agentops.client import Client

    per_client = total // CLIENTS

    def one_client(_):
        with Client(url, token=token) as api:
            for _ in range(per_client):
                api.launch("ticker", {"steps": 1, "delay": 0})

    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one_client, range(CLIENTS)))
    return per_client * CLIENTS / (time.perf_counter() - start)


def launches_in_process(user, total: int) -> float:
    from django.db import connection

    from runs import services

    per_thread = total // CLIENTS

    def one_thread(_):
        try:
            for _ in range(per_thread):
                services.run_launch(user=user, agent="ticker", inputs={"steps": 1, "delay": 0})
        finally:
            connection.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one_thread, range(CLIENTS)))
    return per_thread * CLIENTS / (time.perf_counter() - start)


async def sse_arrivals(url: str, token: str, run_id: str, after: int, arrivals: dict,
                       ready: asyncio.Event, count: int):
    import httpx

    headers = {"Authorization": f"Bearer {token}", "Last-Event-ID": str(after),
               "Accept": "text/event-stream"}
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as client, \
            client.stream("GET", f"{url}/api/v1/runs/{run_id}/events/stream",
                          headers=headers) as response:
        assert response.status_code == 200, response.status_code
        ready.set()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                now = time.perf_counter()
                event = json.loads(line[6:])
                if "n" in (event.get("data") or {}):
                    arrivals[event["data"]["n"]] = now
                    if len(arrivals) >= count:
                        return


async def ws_arrivals(port: int, run_id: str, cookie: str, after: int, arrivals: dict,
                      count: int):
    socket = await open_socket(port, run_id, cookie, after=after)
    try:
        while len(arrivals) < count:
            message = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
            now = time.perf_counter()
            for event in message.get("events", []):
                if "n" in event["data"]:
                    arrivals[event["data"]["n"]] = now
    finally:
        await socket.close()


async def latencies(server, token: str, cookie: str, run_id: str, events: int):
    from runs.models import Run

    head = await asyncio.to_thread(lambda: Run.objects.get(pk=run_id).event_seq)
    sse, ws, stamps, done = {}, {}, {}, threading.Event()
    ready = asyncio.Event()
    sse_task = asyncio.ensure_future(sse_arrivals(server.url, token, run_id, head, sse, ready,
                                                  events))
    ws_task = asyncio.ensure_future(ws_arrivals(server.port, run_id, cookie, head, ws, events))
    await asyncio.wait_for(ready.wait(), 30)
    await asyncio.sleep(0.5)  # both clients connected and caught up before the first commit
    thread = threading.Thread(target=writer, args=(run_id, events, True, stamps, done))
    thread.start()
    try:
        await asyncio.wait_for(asyncio.gather(sse_task, ws_task), timeout=events * 0.2 + 60)
    finally:
        thread.join()
    as_ms = lambda arrivals: [(arrivals[n] - stamps[n]) * 1000 for n in range(events)]  # noqa: E731
    return as_ms(sse), as_ms(ws)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=400)
    parser.add_argument("--events", type=int, default=300)
    args = parser.parse_args()
    setup_django(DB_NAME)
    import tests.workload_agents  # noqa: F401  (the "ticker" agent, as the server loads it)
    from runs.api import tokens
    from tests.support.processes import Server

    if not os.environ.get("REDIS_URL"):
        print("note: no REDIS_URL: both clients are woken by the poll alone")
    user, cookie = bench_user_cookie()
    token = tokens.create(user, name="bench", scopes=["read", "launch"], days=1,
                          max_days=365)[1]
    tmp = Path(tempfile.mkdtemp(prefix="api-bench-"))
    server = Server(tmp, AGENTOPS_DB_POOL="1")
    try:
        launches_over_http(server.url, token, CLIENTS * 4)  # warm up connections and pools
        http_rate = launches_over_http(server.url, token, args.launches)
        direct_rate = launches_in_process(user, args.launches)
        print(f"launches, {CLIENTS} concurrent clients, {args.launches} launches, PostgreSQL")
        print(f"  POST /api/v1/runs          {http_rate:8.1f} launches/s")
        print(f"  baseline services.run_launch {direct_rate:6.1f} launches/s (in process, "
              f"{CLIENTS} threads)")
        print(f"  ratio API / in-process     {http_rate / direct_rate:8.2f}")

        [run_id] = create_runs(user, 1)
        sse, ws = asyncio.run(latencies(server, token, cookie, run_id, args.events))
        print(f"\ncommit → client, {args.events} events, same run, same commits "
              f"(Redis wake-ups: {'yes' if os.environ.get('REDIS_URL') else 'no'})")
        print(f"  SSE stream   {summary(sse)}")
        print(f"  websocket    {summary(ws)}")
        ratio50 = percentile(sse, 50) / percentile(ws, 50)
        ratio95 = percentile(sse, 95) / percentile(ws, 95)
        print(f"  ratio SSE / websocket  p50 x{ratio50:.2f}  p95 x{ratio95:.2f}")
        print(f"  target SSE p95 within 1.5x of the websocket's: "
              f"{'met' if ratio95 <= 1.5 else 'MISSED'}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
