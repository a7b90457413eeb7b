"""500 websocket clients on one Daphne process following 50 live runs: events
delivered per second, commit → arrival latency, and whether any client falls
behind for good.

One real Daphne (Redis wake-ups if REDIS_URL is set, else the polling fallback)
on a fresh PostgreSQL database. This process commits events to 50 runs through
the ORM store (the worker's write path, notify included) at --rate commits per
second per run, --per-commit events each (a step writes log, progress and
checkpoint events together). Clients run in --procs processes, 10 per run;
each checks its events arrive in seq order with no gap and no duplicate, and
times each against the event's `at` (its row's created_at).

After the writers stop, every client must reach its run's last event: a client
that does not within 30 s has fallen behind for good.

Baseline, same process and same Daphne, measured first: one client following
one run at the same per-run rate.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/fanout.py \
        [--clients 500 --runs 50 --seconds 20 --rate 4 --per-commit 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
from live_common import (
    bench_user_cookie,
    create_runs,
    open_socket,
    parse_at,
    percentile,
    setup_django,
    stamping_store,
    summary,
    wall,
    write_events,
)

DB_NAME = "agentops_fanout_bench"
CATCH_UP_SECONDS = 30.0


# --- clients (child processes) ------------------------------------------------------------
class Follower:
    def __init__(self, run_id: str, after: int):
        self.run_id = run_id
        self.last = after
        self.received = 0
        self.gaps = 0
        self.duplicates = 0
        self.latencies: list[float] = []
        self.sent_at: list[float] = []
        self.caught_up_after: float | None = None


async def follow(socket, follower: Follower, heads: dict, stopped_at: dict):
    async for frame in socket:
        message = json.loads(frame)
        if message.get("type") != "events":
            continue
        now = wall()
        for event in message["events"]:
            seq = event["seq"]
            if seq <= follower.last:
                follower.duplicates += 1
                continue
            if seq != follower.last + 1:
                follower.gaps += 1
            follower.last = seq
            follower.received += 1
            at = parse_at(event["at"])
            follower.latencies.append((now - at) * 1000)
            follower.sent_at.append(at)
        head = heads.get(follower.run_id)
        if head is not None and follower.last >= head and follower.caught_up_after is None:
            follower.caught_up_after = wall() - stopped_at["t"]
            return


async def client_main(port, cookie, assignments, after, ready, control, results):
    followers, sockets = [], []
    gate = asyncio.Semaphore(20)

    async def connect(run_id):
        async with gate:
            return await open_socket(port, run_id, cookie, after[run_id])

    sockets = await asyncio.gather(*(connect(run_id) for run_id in assignments))
    followers = [Follower(run_id, after[run_id]) for run_id in assignments]
    heads, stopped_at = {}, {}
    tasks = [asyncio.ensure_future(follow(s, f, heads, stopped_at))
             for s, f in zip(sockets, followers)]
    ready.put(len(sockets))
    final = await asyncio.to_thread(control.get)   # the writers stopped: the last seqs
    stopped_at["t"] = final["stopped_at"]
    heads.update(final["heads"])
    for follower, task in zip(followers, tasks):   # already there before the heads came
        if follower.last >= heads[follower.run_id] and follower.caught_up_after is None:
            follower.caught_up_after = wall() - stopped_at["t"]
            task.cancel()
    await asyncio.wait(tasks, timeout=CATCH_UP_SECONDS)
    for task in tasks:
        task.cancel()
    for socket in sockets:
        await socket.close()
    results.put({
        "latencies": [x for f in followers for x in f.latencies],
        "sent_at": [x for f in followers for x in f.sent_at],
        "received": sum(f.received for f in followers),
        "gaps": sum(f.gaps for f in followers), "duplicates": sum(f.duplicates for f in followers),
        "behind": sum(1 for f in followers if f.caught_up_after is None),
        "catch_up": [f.caught_up_after for f in followers if f.caught_up_after is not None],
    })


def client_process(*args):
    asyncio.run(client_main(*args))


# --- writers (this process) ---------------------------------------------------------------------
def writers(run_ids, rate: float, per_commit: int, seconds: float, wake: bool,
            threads: int = 5) -> int:
    """Commit to every run at `rate` commits/s for `seconds`; returns events written."""
    written = [0] * threads

    def work(index, runs):
        from django.db import connection

        store = stamping_store(lambda seq: None, wake)
        interval = 1.0 / rate
        next_at = {run_id: time.monotonic() + interval * i / len(runs)
                   for i, run_id in enumerate(runs)}
        ends = time.monotonic() + seconds
        n = 0
        try:
            while time.monotonic() < ends:
                run_id = min(next_at, key=next_at.get)
                delay = next_at[run_id] - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                write_events(store, run_id, [{"step": n, "message": f"event {n}.{k}"}
                                             for k in range(per_commit)])
                written[index] += per_commit
                next_at[run_id] += interval
                n += 1
        finally:
            connection.close()

    shards = [run_ids[i::threads] for i in range(threads)]
    pool = [threading.Thread(target=work, args=(i, shard)) for i, shard in enumerate(shards)
            if shard]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(written)


def cpu_seconds(process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def heads_of(run_ids) -> dict:
    from runs.models import Run

    return dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "event_seq"))


# --- the baseline: one client, one run ---------------------------------------------------------
def baseline(port, cookie, run_id, rate, per_commit, seconds, wake) -> list[float]:
    latencies = []

    async def main():
        after = (await asyncio.to_thread(heads_of, [run_id]))[run_id]
        socket = await open_socket(port, run_id, cookie, after)
        follower = Follower(run_id, after)
        writer = asyncio.ensure_future(asyncio.to_thread(
            writers, [run_id], rate, per_commit, seconds, wake, 1))
        heads, stopped = {}, {"t": 0}
        reader = asyncio.ensure_future(follow(socket, follower, heads, stopped))
        await writer
        heads.update(await asyncio.to_thread(heads_of, [run_id]))
        stopped["t"] = wall()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 10)
        await socket.close()
        assert follower.gaps == 0 and follower.duplicates == 0
        latencies.extend(follower.latencies)

    asyncio.run(main())
    return latencies


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=4.0, help="commits per second per run")
    parser.add_argument("--per-commit", type=int, default=3)
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--timeline", action="store_true", help="latency per 2 s of the run")
    args = parser.parse_args()
    setup_django(DB_NAME)
    from django.db import connection

    from tests.support.processes import Server

    wake = bool(os.environ.get("REDIS_URL"))
    mode = "Redis wake-ups" if wake else "polling fallback (no REDIS_URL)"
    user, cookie = bench_user_cookie()
    run_ids = create_runs(user, args.runs + 1)
    base_run, run_ids = run_ids[0], run_ids[1:]
    tmp = Path(tempfile.mkdtemp(prefix="fanout-"))
    server = Server(tmp, AGENTOPS_DB_POOL="1")
    print(f"fan-out: {args.clients} clients on one Daphne following {args.runs} runs, "
          f"{args.rate:g} commits/s per run × {args.per_commit} events, {args.seconds:g} s, "
          f"{mode}, PostgreSQL")
    try:
        base = baseline(server.port, cookie, base_run, args.rate, args.per_commit,
                        min(args.seconds, 10), wake)
        connection.close()
        after = heads_of(run_ids)
        per_proc = [[] for _ in range(args.procs)]
        for i in range(args.clients):
            per_proc[i % args.procs].append(run_ids[i % len(run_ids)])
        ctx = mp.get_context("spawn")
        ready, results = ctx.Queue(), ctx.Queue()
        controls = [ctx.Queue() for _ in per_proc]
        procs = [ctx.Process(target=client_process, args=(server.port, cookie, share, after,
                                                          ready, control, results))
                 for share, control in zip(per_proc, controls)]
        for proc in procs:
            proc.start()
        connected = sum(ready.get(timeout=120) for _ in procs)
        daphne = psutil.Process(server.pid)
        clients = [psutil.Process(proc.pid) for proc in procs]
        cpu_before = [cpu_seconds(p) for p in (daphne, *clients)]
        started = time.monotonic()
        written = writers(run_ids, args.rate, args.per_commit, args.seconds, wake)
        elapsed = time.monotonic() - started
        cpu = [cpu_seconds(p) - b for p, b in zip((daphne, *clients), cpu_before)]
        final = {"heads": heads_of(run_ids), "stopped_at": wall()}
        for control in controls:
            control.put(final)
        parts = [results.get(timeout=CATCH_UP_SECONDS + 60) for _ in procs]
        for proc in procs:
            proc.join(10)
    finally:
        server.stop()

    latencies = [x for p in parts for x in p["latencies"]]
    sent_at = [x for p in parts for x in p["sent_at"]]
    received = sum(p["received"] for p in parts)
    catch_up = [x for p in parts for x in p["catch_up"]]
    behind = sum(p["behind"] for p in parts)
    print(f"  connected          {connected} clients; while writing, Daphne used "
          f"{100 * cpu[0] / elapsed:.0f}% of a core, the client processes "
          f"{100 * sum(cpu[1:]) / elapsed:.0f}% ({os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f})")
    print(f"  written            {written} events ({written / elapsed:.0f}/s)")
    print(f"  delivered          {received} events ({received / elapsed:.0f}/s to clients; "
          f"{received / max(written, 1):.2f} per event written, expected "
          f"{args.clients / args.runs:.2f})")
    print(f"  commit → arrival   {summary(latencies)}")
    print(f"  baseline 1 client  {summary(base)}")
    print(f"  ratio to baseline  p50 ×{percentile(latencies, 50) / percentile(base, 50):.1f}  "
          f"p95 ×{percentile(latencies, 95) / percentile(base, 95):.1f}")
    if args.timeline:
        first = min(sent_at)
        buckets = {}
        for at, latency in zip(sent_at, latencies):
            buckets.setdefault(int((at - first) // 2), []).append(latency)
        for bucket, values in sorted(buckets.items()):
            print(f"    t={bucket * 2:>3}-{bucket * 2 + 2:<3}s {summary(values)}")
    print(f"  gaps {sum(p['gaps'] for p in parts)}, duplicates "
          f"{sum(p['duplicates'] for p in parts)}")
    print(f"  after the writers stopped: {len(catch_up)} clients at their run's last event "
          f"(max {max(catch_up, default=0) * 1000:.0f} ms, "
          f"mean {statistics.mean(catch_up or [0]) * 1000:.0f} ms); "
          f"{behind} fell behind for good")


if __name__ == "__main__":
    main()
