"""Per-effect cost of ctx.call on a no-op idempotent tool, against the raw floor.

    python -m bench.effect_overhead [EFFECTS]

Baseline, measured in the same process: a one-row INSERT + COMMIT loop with
psycopg in autocommit. Target (issue 2): at most 2x the floor.
"""

import statistics
import sys
import time

from bench.setup_db import raw_insert_floor, setup_django


def main(effects: int = 2000, repeats: int = 5):
    url = setup_django()
    from runs.durable import (
        Agent,
        AgentRegistry,
        Done,
        WorkerConfig,
        agent,
        control,
        execute_run,
        tool,
    )
    from runs.store import OrmStore

    registry = AgentRegistry()

    @tool(idempotent=True)
    def noop(i, *, idempotency_key):
        return i

    timings = {}

    @agent("bench-effects", registry=registry)
    class Effects(Agent):
        def start(self, inputs):
            return {"n": inputs["n"]}

        def step(self, ctx, state):
            start = time.perf_counter()
            for i in range(state["n"]):
                ctx.call(noop, i)
            timings[ctx.run_id] = time.perf_counter() - start
            return Done({"n": state["n"]})

    store = OrmStore()
    config = WorkerConfig(owner="bench", lease_seconds=60, slice_seconds=1e9)
    floors, ours = [], []
    for _ in range(repeats):
        floors.append(raw_insert_floor(url, effects))
        run = control.launch(store, agent="bench-effects", inputs={"n": effects}, registry=registry)
        assert execute_run(store, run.id, config, registry=registry) == "succeeded"
        ours.append(timings[run.id] / effects)
    floor, per_effect = statistics.median(floors), statistics.median(ours)
    print(f"raw floor (INSERT+COMMIT, autocommit): {floor * 1000:.3f} ms/row "
          f"(min {min(floors) * 1000:.3f}, max {max(floors) * 1000:.3f})")
    print(f"agentops ctx.call, no-op idempotent tool: {per_effect * 1000:.3f} ms/effect "
          f"(min {min(ours) * 1000:.3f}, max {max(ours) * 1000:.3f}), "
          f"{1 / per_effect:.0f} effects/s")
    print(f"ratio agentops/floor: {per_effect / floor:.2f}x  (target <= 2x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
