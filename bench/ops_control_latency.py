"""Pause, resume and cancel latency against the length of a run's history, on PostgreSQL.

Each run is running, held by a worker's live lease (a worker that never writes), with
a history of N done calls and a checkpoint after every step: pause and cancel are
requests the worker would honour at its next effect boundary, resume withdraws a
pause. Each action is an operator's POST to the run page's action form (middleware,
session, permission, form, service, engine, commit) made in this process; the
service call alone is measured as well. Between trials the control is cleared in SQL
(not timed).

    .venv/bin/python bench/ops_control_latency.py [--trials 30] [--sizes 100,10000,100000]

Target: for each action, the median on the largest history at most 1.5 times the
median on the smallest, and every median under 50 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ops_common import setup_django, summary

DB_NAME = "agentops_ops_bench_controls"
ACTIONS = ("pause", "resume", "cancel")
LABELS = ("operator page", "service call")
TARGET_RATIO, TARGET_MS = 1.5, 50.0
WARM_UP = 3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--sizes", default="100,10000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    setup_django(DB_NAME)

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    import tests.operator.agents  # noqa: F401  (registers "ledger")
    from runs import services
    from runs.models import Run
    from runs.operator.groups import ensure_operators_group
    from tests.support.long_history import give_history

    operator, _ = get_user_model().objects.get_or_create(username="bench-operator")
    operator.groups.add(ensure_operators_group())
    client = Client()
    client.force_login(operator)

    runs = {}
    for size in sizes:
        started = time.perf_counter()
        launched = services.run_launch(user=operator, agent="ledger", inputs={"steps": 1})
        runs[size] = give_history(launched, size).pk
        print(f"history of {size} calls written in {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_effect, runs_checkpoint, runs_run")

    def via_page(run_id, action):
        response = client.post(f"/ops/runs/{run_id}/act/", {"action": action,
                                                             "reason": f"bench {action}"})
        assert response.status_code == 302, response.status_code

    def via_service(run_id, action):
        service = {"pause": services.run_pause, "resume": services.run_resume,
                   "cancel": services.run_cancel}[action]
        service(run_id=run_id, user=operator, reason=f"bench {action}")

    # Sizes interleaved trial by trial, after a warm-up, so that neither the order of
    # the runs nor the warming of caches and connections favours one size.
    results = {(label, size): {a: [] for a in ACTIONS} for label in LABELS for size in sizes}
    for trial in range(WARM_UP + args.trials):
        for label, call in (("operator page", via_page), ("service call", via_service)):
            for size, run_id in runs.items():
                for action in ACTIONS:
                    started = time.perf_counter()
                    call(run_id, action)
                    elapsed = (time.perf_counter() - started) * 1000
                    if trial >= WARM_UP:
                        results[label, size][action].append(elapsed)
                Run.objects.filter(pk=run_id).update(control=None)  # cancel pending: undo it
                assert Run.objects.get(pk=run_id).status == "running"
    report(results, sizes, args.trials)


def report(results, sizes, trials):
    print(f"\n{trials} trials per action, a running run leased to a worker; PostgreSQL")
    verdicts = []
    for label in LABELS:
        print(f"\n{label}:")
        for action in ACTIONS:
            medians = {size: statistics.median(results[label, size][action]) for size in sizes}
            for size in sizes:
                print(f"  {action:<6} {size:>7} calls: {summary(results[label, size][action])}")
            ratio = medians[sizes[-1]] / medians[sizes[0]]
            print(f"  {action:<6} median ratio {sizes[-1]} / {sizes[0]} calls: {ratio:.2f}")
            verdicts.append(ratio <= TARGET_RATIO and max(medians.values()) < TARGET_MS)
    met = all(verdicts)
    print(f"\ntarget (ratio <= {TARGET_RATIO}, every median < {TARGET_MS:.0f} ms): "
          f"{'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
