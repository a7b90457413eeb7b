"""Time from an operator's click on pause to the run's status `paused`, for a run whose
tool calls take 100 ms, on real worker trees (PostgreSQL; Redis if REDIS_URL).

The click is the operator view's POST (middleware, auth, form, service) made in this
process; the run executes in a worker process. The baseline, in the same
process and on the same run: the pause service called directly (no view).

    .venv/bin/python bench/ops_pause_latency.py [--trials 40]

Target: p95 under 1 s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ops_common import percentile, setup_django, summary

DB_NAME = "agentops_ops_bench_pause"


def wait(predicate, timeout=30.0, interval=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    raise TimeoutError("timed out")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--tool-ms", type=float, default=100)
    args = parser.parse_args()
    setup_django(DB_NAME)

    from django.contrib.auth import get_user_model
    from django.test import Client

    from runs import services
    from runs.models import Run
    from runs.operator.groups import ensure_operators_group
    from tests.support.processes import Cluster

    operator, _ = get_user_model().objects.get_or_create(username="bench-operator")
    operator.groups.add(ensure_operators_group())
    client = Client()
    client.force_login(operator)
    tmp = Path(tempfile.mkdtemp(prefix="ops-pause-"))
    cluster = Cluster(tmp, workers=2, AGENTOPS_AGENT_MODULES="tests.operator.agents")
    try:
        import tests.operator.agents  # noqa: F401  (registers "ledger" here too)

        run = services.run_launch(user=operator, agent="ledger", inputs={
            "steps": 100000, "delay": args.tool_ms / 1000, "charge": True})

        def status():
            return Run.objects.values_list("status", flat=True).get(pk=run.pk)

        def click(reason):
            response = client.post(f"/ops/runs/{run.pk}/act/", {"action": "pause",
                                                                 "reason": reason})
            assert response.status_code == 302

        def direct(reason):
            services.run_pause(run_id=run.pk, user=operator, reason=reason)

        def measure(pause, label):
            times = []
            for i in range(args.trials):
                wait(lambda: status() == "running")
                time.sleep(0.05 + (i % 7) * 0.013)  # land anywhere inside a tool call
                started = time.perf_counter()
                pause(f"{label} {i}")
                wait(lambda: status() == "paused", timeout=10)
                times.append((time.perf_counter() - started) * 1000)
                services.run_resume(run_id=run.pk, user=operator, reason="bench")
            return times

        wait(lambda: status() == "running")
        clicks = measure(click, "click")
        baseline = measure(direct, "direct")
    finally:
        cluster.stop()
        print(f"(cluster log: {cluster.log_path})")
    print(f"\nrun with {args.tool_ms:.0f} ms tool calls (an idempotent and a non-idempotent "
          f"call per step), 2 workers, {'Redis' if os.environ.get('REDIS_URL') else 'no Redis'}")
    print(f"click → paused (operator view): {summary(clicks)}")
    print(f"baseline: service call → paused: {summary(baseline)}")
    p95 = percentile(clicks, 95)
    print(f"ratio p95 click / p95 baseline: {p95 / percentile(baseline, 95):.2f}")
    print(f"ratio p95 click / tool call: {p95 / args.tool_ms:.2f}")
    print(f"target p95 < 1000 ms: {'met' if p95 < 1000 else 'MISSED'} ({p95:.0f} ms)")


if __name__ == "__main__":
    main()
