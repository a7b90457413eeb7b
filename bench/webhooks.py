"""Does a dead webhook endpoint slow the runs whose events it receives?

    python -m bench.webhooks [--runs 20] [--rounds 5]

On a PostgreSQL database of its own (``agentops_bench_webhooks``, migrated fresh), in
this process: batches of short runs (10 steps of a no-op effect each) executed by
``execute_run`` one after another, timed from launch to the end. Baseline batches run
with no subscription; subscribed batches with five active subscriptions (every event,
every run) to an endpoint that refuses connections, while, as in a cluster, one thread
dispatches events every 0.5 s (``runs/webhooks/dispatch.py``) and another executes the
delivery runs as they come due (each attempt fails, the retries become durable timers).
The two kinds of batch take turns so that both meet the same load. Prints the median
time per run of each and their ratio (target: about 1, nothing of the delivery is on a
run's path), and what the dispatcher cost per call.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time

from bench.setup_db import setup_django

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench_webhooks"
os.environ.setdefault("AGENTOPS_WEBHOOK_RETRY_INITIAL", "0.2")
os.environ.setdefault("AGENTOPS_WEBHOOK_RETRY_MAX_INTERVAL", "2")


def main(runs: int, rounds: int) -> None:
    setup_django(os.environ.get("BENCH_WEBHOOKS_DATABASE_URL", DEFAULT_URL))
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from runs.durable import (
        Agent,
        AgentRegistry,
        Done,
        WorkerConfig,
        agent,
        control,
        execute_run,
        registry,
        tool,
    )
    from runs.models import Run
    from runs.storage.orm import OrmStore
    from runs.webhooks.agents import DELIVERY_AGENT
    from runs.webhooks.dispatch import dispatch
    from runs.webhooks.models import Attempt, Delivery, Subscription

    bench_registry = AgentRegistry()

    @tool(idempotent=True)
    def noop(i, *, idempotency_key):
        return i

    @agent("bench-short", registry=bench_registry)
    class Short(Agent):
        def start(self, inputs):
            return {"i": 0}

        def step(self, ctx, state):
            ctx.call(noop, state["i"])
            state["i"] += 1
            return Done(state) if state["i"] >= 10 else state

    user = get_user_model().objects.create_user("bench", password="bench-pass-12345")
    def subscribe():  # fresh ones: a subscription receives no event from before it existed
        return [Subscription.objects.create(owner=user, url="http://127.0.0.1:9/dead",
                                            events=["run.ended", "run.needs_attention",
                                                    "run.waiting_for_input"])
                for _ in range(5)]
    store = OrmStore()
    config = WorkerConfig(owner="bench:1:main", lease_seconds=60, slice_seconds=math.inf)
    stop = threading.Event()
    dispatch_times: list[float] = []

    def dispatcher():
        while not stop.is_set():
            start = time.perf_counter()
            dispatch()
            dispatch_times.append(time.perf_counter() - start)
            stop.wait(0.5)
        connection.close()

    def delivery_worker():
        worker = WorkerConfig(owner="bench:2:deliveries", lease_seconds=60, slice_seconds=5)
        while not stop.is_set():
            due = list(Run.objects.filter(agent=DELIVERY_AGENT, status__in=["queued", "waiting"])
                       .exclude(wake_at__gt=timezone.now()).values_list("pk", flat=True)[:50])
            for run_id in due:
                execute_run(store, run_id, worker, registry=registry)
            stop.wait(0.2)
        connection.close()

    def batch() -> list[float]:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            run = control.launch(store, agent="bench-short", inputs={}, owner=str(user.pk),
                                 registry=bench_registry)
            assert execute_run(store, run.id, config, registry=bench_registry) == "succeeded"
            times.append(time.perf_counter() - start)
        return times

    threads = [threading.Thread(target=dispatcher), threading.Thread(target=delivery_worker)]
    for thread in threads:
        thread.start()
    baseline, subscribed = [], []
    try:
        batch()  # warm up
        subs: list = []
        for _ in range(rounds):
            baseline += batch()
            subs = subscribe()
            subscribed += batch()
            expected = 5 * len(subscribed)
            deadline = time.monotonic() + 120  # let the dispatcher catch up before switching off
            while Delivery.objects.count() < expected and time.monotonic() < deadline:
                time.sleep(0.1)
            Subscription.objects.filter(pk__in=[s.pk for s in subs]).update(active=False)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    base, subs_t = statistics.median(baseline), statistics.median(subscribed)
    print(f"runs of 10 effects, no subscription:         {base * 1000:.1f} ms/run median "
          f"(p90 {statistics.quantiles(baseline, n=10)[-1] * 1000:.1f}), {len(baseline)} runs")
    print(f"runs of 10 effects, 5 subscriptions to a dead endpoint: {subs_t * 1000:.1f} ms/run "
          f"median (p90 {statistics.quantiles(subscribed, n=10)[-1] * 1000:.1f}), "
          f"{len(subscribed)} runs")
    print(f"ratio subscribed/baseline: {subs_t / base:.2f}x  (target: about 1)")
    print(f"deliveries made: {Delivery.objects.count()} (expected {5 * len(subscribed)}), "
          f"attempts refused: {Attempt.objects.count()}, delivered: "
          f"{Delivery.objects.filter(status='delivered').count()}")
    print(f"dispatch(): {statistics.median(dispatch_times) * 1000:.2f} ms/call median over "
          f"{len(dispatch_times)} calls (max {max(dispatch_times) * 1000:.1f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    main(args.runs, args.rounds)
