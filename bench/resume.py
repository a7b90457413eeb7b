"""Resume cost: from a worker's claim to the first new effect, for runs whose
history holds 1,000 / 10,000 / 100,000 effects (a checkpoint every 100 steps,
50 effects to replay since the last one).

    python -m bench.resume

Baseline in the same process: the same measurement for a fresh run with no
history. Target (issue 2): under 100 ms, and flat as the history grows.
"""

import math
import statistics
import time
from datetime import datetime, timezone

from bench.setup_db import setup_django

REPLAYED = 50


def main(sizes=(1_000, 10_000, 100_000), repeats=5):
    setup_django()
    from runs.durable import (
        Agent,
        AgentRegistry,
        WorkerConfig,
        agent,
        control,
        execute_run,
        idempotency_key,
        tool,
    )
    from runs.durable.serde import encode_state
    from runs.models import Checkpoint, Effect, Run
    from runs.storage import database_store

    registry = AgentRegistry()
    first_new = {}

    class Measured(BaseException):
        """Ends the measurement at the first new effect, like a crash would."""

    @tool(idempotent=True)
    def noop(i, *, idempotency_key):
        first_new["at"] = time.perf_counter()
        raise Measured

    @agent("bench-resume", registry=registry)
    class Resume(Agent):
        checkpoint_every = 100

        def start(self, inputs):
            return {"i": 0}

        def step(self, ctx, state):
            ctx.call(noop, state["i"])
            state["i"] += 1
            return state

    store = database_store()
    config = WorkerConfig(owner="bench", lease_seconds=60, slice_seconds=math.inf)

    def build_history(effects: int) -> str:
        """A run that crashed after `effects` steps of one effect each."""
        run = control.launch(store, agent="bench-resume", inputs={}, registry=registry)
        now = datetime.now(timezone.utc)
        last_cp = effects - REPLAYED
        Effect.objects.bulk_create(
            [Effect(run_id=run.id, branch=1, step_no=s, seq=0, kind="call", tool=noop.name,
                    digest=_digest(noop.name, s - 1), key=idempotency_key(run.id, 1, s, 0),
                    idempotent=True, status="done", result=s - 1, attempts=1, started_at=now,
                    finished_at=now, epoch=1) for s in range(1, effects + 1)], batch_size=5000)
        Checkpoint.objects.bulk_create(
            [Checkpoint(run_id=run.id, number=n + 1, branch=1, step_no=step,
                        codec="json", blob=encode_state({"i": step})[0],
                        size=len(encode_state({"i": step})[0]))
             for n, step in enumerate(range(0, last_cp + 1, 100))], batch_size=5000)
        Run.objects.filter(pk=run.id).update(
            status="running", step_no=effects, epoch=1, lease_owner="dead:1:x",
            lease_expires_at=now, checkpoint_count=last_cp // 100 + 1)
        return run.id

    def time_resume(run_id: str) -> float:
        first_new.clear()
        start = time.perf_counter()
        try:
            execute_run(store, run_id, config, registry=registry)
        except Measured:
            pass
        return first_new["at"] - start

    fresh = []
    for _ in range(repeats):
        run = control.launch(store, agent="bench-resume", inputs={}, registry=registry)
        fresh.append(time_resume(run.id))
    print(f"baseline: fresh run, claim to first effect: {_ms(fresh)}")
    medians = {}
    for size in sizes:
        ids = [build_history(size) for _ in range(repeats)]
        times = [time_resume(run_id) for run_id in ids]
        medians[size] = statistics.median(times)
        print(f"history of {size:>7,} effects ({REPLAYED} replayed): claim to first new effect "
              f"{_ms(times)}, ratio to fresh {medians[size] / statistics.median(fresh):.2f}x")
    smallest, largest = min(sizes), max(sizes)
    print(f"flatness: {largest:,} vs {smallest:,} effects: "
          f"{medians[largest] / medians[smallest]:.2f}x  (target: ~1x, and under 100 ms)")


def _digest(name, i):
    from runs.durable.serde import digest

    return digest(name, (i,), {})


def _ms(values):
    return (f"median {statistics.median(values) * 1000:.1f} ms "
            f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})")


if __name__ == "__main__":
    main()
