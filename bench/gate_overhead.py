"""What the pre-call gates (runs/durable/policies/gates.py) cost a call, on the ORM store.

    python -m bench.gate_overhead [EFFECTS]

Baseline, measured in the same process: the same agent with no gates
(WorkerConfig(gates=())). Then the worker's gates as deployed (run budget, quotas,
approvals from the database: runs/budgets/gates.py) on a call no rule covers, and on a
metered call (priced, summed on the run, checked against the run's budget and the
quotas). Question: does gating every call cost the engine's hot path?
"""

import math
import statistics
import sys
import time

from bench.setup_db import setup_django


def main(effects: int = 1000, repeats: int = 5):
    setup_django()
    from runs.budgets.gates import worker_gates
    from runs.budgets.prices import price
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
    from runs.storage.orm import OrmStore

    registry = AgentRegistry()

    @tool(idempotent=True, name="bench.noop")
    def noop(i, *, idempotency_key):
        return i

    @tool(idempotent=True, name="bench.model", meter=lambda result, arguments: {
        "model": "scripted", "prompt_tokens": 10, "completion_tokens": 5})
    def model(i, *, idempotency_key):
        return i

    timings = {}

    @agent("bench-gates", registry=registry)
    class Calls(Agent):
        def start(self, inputs):
            return dict(inputs)

        def step(self, ctx, state):
            fn = model if state["metered"] else noop
            start = time.perf_counter()
            for i in range(state["n"]):
                ctx.call(fn, i)
            timings[ctx.run_id] = time.perf_counter() - start
            return Done({"n": state["n"]})

    store = OrmStore()

    def per_call(gates, metered):
        config = WorkerConfig(owner="bench", lease_seconds=60, slice_seconds=math.inf, gates=gates,
                              price=price)
        samples = []
        for _ in range(repeats):
            run = control.launch(store, agent="bench-gates", registry=registry, budget={},
                                 inputs={"n": effects, "metered": metered})
            assert execute_run(store, run.id, config, registry=registry) == "succeeded"
            samples.append(timings[run.id] / effects)
        return statistics.median(samples)

    baseline = per_call((), False)
    print(f"no gates, plain call:            {baseline * 1000:.3f} ms/call")
    for label, metered in (("worker gates, plain call:       ", False),
                           ("worker gates, metered call:     ", True)):
        gated = per_call(worker_gates(), metered)
        print(f"{label} {gated * 1000:.3f} ms/call  ratio {gated / baseline:.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
