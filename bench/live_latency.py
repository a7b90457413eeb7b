"""From an event's COMMIT to its arrival at a connected websocket client: p50/p95,
with Redis waking the consumer, and with the polling fallback alone.

One real Daphne per mode, on a fresh PostgreSQL database. This process commits
log events through the ORM store (the worker's write path, `notify_run` included
in the Redis mode) at random intervals, stamps each right after its COMMIT, and a
websocket client here times
its arrival on the run page's socket. (The stamp is taken in the store's notify hook,
which runs right after the COMMIT, before the wake-up is sent.)

Baseline, same process, same socket: a ping → pong round trip (the transport's
floor for anything the server pushes).

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/live_latency.py [--events 300]

Target (issue 4): p95 under 100 ms with Redis. Polling: within one poll interval
(AGENTOPS_LIVE_POLL, 0.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from live_common import (
    bench_user_cookie,
    create_runs,
    open_socket,
    percentile,
    setup_django,
    stamping_store,
    summary,
    write_events,
)

DB_NAME = "agentops_live_bench"


async def ping_rtts(socket, count: int) -> list[float]:
    rtts = []
    for _ in range(count):
        start = time.perf_counter()
        await socket.send('{"type": "ping"}')
        while json.loads(await socket.recv())["type"] != "pong":
            pass
        rtts.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.005)
    return rtts


def writer(run_id: str, count: int, wake: bool, stamps: dict, done: threading.Event,
           gap=(0.02, 0.08)):
    from django.db import connection

    current = {}
    store = stamping_store(lambda seq: stamps.__setitem__(current["n"], time.perf_counter()),
                           wake)
    rng = random.Random(4)
    try:
        for n in range(count):
            time.sleep(rng.uniform(*gap))  # uniform over the poll interval, for polling
            current["n"] = n
            write_events(store, run_id, [{"step": 0, "message": f"bench {n}", "n": n}])
    finally:
        connection.close()
        done.set()


async def measure(port: int, run_id: str, cookie: str, events: int, wake: bool):
    from runs.models import Run

    head = await asyncio.to_thread(lambda: Run.objects.get(pk=run_id).event_seq)
    socket = await open_socket(port, run_id, cookie, after=head)
    rtts = await ping_rtts(socket, 100)
    stamps, arrivals, done = {}, {}, threading.Event()
    thread = threading.Thread(target=writer, args=(run_id, events, wake, stamps, done))
    thread.start()
    try:
        while len(arrivals) < events:
            message = json.loads(await asyncio.wait_for(socket.recv(), timeout=10))
            now = time.perf_counter()
            for event in message.get("events", []):
                if "n" in event["data"]:
                    arrivals[event["data"]["n"]] = now
    finally:
        thread.join()
        await socket.close()
    latencies = [(arrivals[n] - stamps[n]) * 1000 for n in range(events)]
    return latencies, rtts


def run_mode(mode: str, events: int, tmp: Path) -> tuple[list[float], list[float]]:
    from tests.support.processes import Server

    user, cookie = bench_user_cookie()
    [run_id] = create_runs(user, 1)
    env = {"REDIS_URL": os.environ["REDIS_URL"]} if mode == "redis" else {"REDIS_URL": ""}
    server = Server(tmp, AGENTOPS_DB_POOL="1", **env)
    try:
        return asyncio.run(measure(server.port, run_id, cookie, events, wake=mode == "redis"))
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--modes", default="redis,poll")
    args = parser.parse_args()
    setup_django(DB_NAME)
    from django.conf import settings

    tmp = Path(tempfile.mkdtemp(prefix="live-latency-"))
    modes = [m for m in args.modes.split(",") if m]
    if "redis" in modes and not os.environ.get("REDIS_URL"):
        print("redis: skipped (set REDIS_URL)")
        modes.remove("redis")
    print(f"live latency: commit → websocket arrival, {args.events} events per mode, "
          f"poll interval {settings.AGENTOPS['LIVE_POLL_SECONDS']} s, PostgreSQL")
    for mode in modes:
        latencies, rtts = run_mode(mode, args.events, tmp)
        base50, base95 = percentile(rtts, 50), percentile(rtts, 95)
        print(f"\n{mode}:")
        print(f"  commit → arrival   {summary(latencies)}")
        print(f"  baseline ping→pong {summary(rtts)}")
        print(f"  ratio to baseline  p50 ×{percentile(latencies, 50) / base50:.1f}  "
              f"p95 ×{percentile(latencies, 95) / base95:.1f}")
        if mode == "redis":
            verdict = "met" if percentile(latencies, 95) < 100 else "MISSED"
            print(f"  target p95 < 100 ms: {verdict}")


if __name__ == "__main__":
    main()
