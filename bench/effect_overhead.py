"""Per-effect cost of ctx.call on a no-op idempotent tool, against the raw floor, and
what metrics and tracing add to it.

    python -m bench.effect_overhead [EFFECTS]

Baseline, measured in the same process: a one-row INSERT + COMMIT loop with
psycopg in autocommit. Target (issue 2): at most 2x the floor.

Observability (issue 18), in the same run, the modes interleaved repeat by repeat:
the engine's default no-op observer ("off"), metrics only (prometheus-client, in
multiprocess mode as deployed: PROMETHEUS_MULTIPROC_DIR), tracing only (spans through
a BatchSpanProcessor and the OTLP/HTTP exporter to a collector in another process),
and both. Target: at most 10% more per effect with both on.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

# multiprocess metrics, as bin/serve and deployments run them (read at import time)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-metrics-"))

from bench.setup_db import ROOT, raw_insert_floor, setup_django  # noqa: E402

MODES = ("off", "metrics", "tracing", "both")


def collector():
    """An OTLP/HTTP collector in a process of its own (tests/support/otlp.py)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.otlp"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def main(effects: int = 2000, repeats: int = 5):
    url = setup_django()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from runs.durable import (
        Agent,
        AgentRegistry,
        Done,
        WorkerConfig,
        agent,
        control,
        execute_run,
        observe,
        tool,
    )
    from runs.observability import tracing
    from runs.observability.observer import install
    from runs.storage import database_store

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

    otlp, endpoint = collector()

    def observe_as(mode: str) -> None:
        tracing.off()  # exports what the last mode left, then shuts its processor down
        if mode in ("tracing", "both"):
            tracing.use(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
        if mode == "off":
            observe.install(observe.Observer())
        else:
            install(metrics_on=mode in ("metrics", "both"))

    store = database_store()
    config = WorkerConfig(owner="bench", lease_seconds=60, slice_seconds=1e9)
    floors, ours = [], {mode: [] for mode in MODES}
    try:
        for _ in range(repeats):
            floors.append(raw_insert_floor(url, effects))
            for mode in MODES:
                observe_as(mode)
                run = control.launch(store, agent="bench-effects", inputs={"n": effects},
                                     registry=registry)
                assert execute_run(store, run.id, config, registry=registry) == "succeeded"
                ours[mode].append(timings[run.id] / effects)
    finally:
        observe_as("off")
        otlp.stdin.close()
        otlp.wait(10)
    floor = statistics.median(floors)
    per_effect = {mode: statistics.median(values) for mode, values in ours.items()}
    off = per_effect["off"]
    print(f"raw floor (INSERT+COMMIT, autocommit): {floor * 1000:.3f} ms/row "
          f"(min {min(floors) * 1000:.3f}, max {max(floors) * 1000:.3f})")
    print(f"agentops ctx.call, no-op idempotent tool: {off * 1000:.3f} ms/effect "
          f"(min {min(ours['off']) * 1000:.3f}, max {max(ours['off']) * 1000:.3f}), "
          f"{1 / off:.0f} effects/s")
    print(f"ratio agentops/floor: {off / floor:.2f}x  (target <= 2x)")
    print(f"observability, {effects} effects x {repeats} repeats per mode, interleaved:")
    for mode in MODES:
        values = ours[mode]
        print(f"  {mode:8s} {per_effect[mode] * 1000:.3f} ms/effect (min {min(values) * 1000:.3f}, "
              f"max {max(values) * 1000:.3f})  {per_effect[mode] / off:.3f}x off, "
              f"+{(per_effect[mode] - off) * 1e6:.0f} us")
    print(f"ratio both/off: {per_effect['both'] / off:.3f}x  (target <= 1.10x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
