"""Per-effect cost of ctx.call on a no-op idempotent tool, against the raw floor, and
what metrics and tracing add to it.

    python -m bench.effect_overhead [EFFECTS [REPEATS]]      (1000 and 40 by default)

Baseline, measured in the same process: a one-row INSERT + COMMIT loop with
psycopg in autocommit. Target (issue 2): at most 2x the floor.

Observability (issue 18), in the same run, the modes interleaved repeat by repeat:
the engine's default no-op observer ("bare": what the ratio to the floor uses), a
deployment with metrics and tracing off ("off": the observer is installed all the same,
it gives every log line its run's context), metrics only (prometheus-client, in
multiprocess mode as deployed: PROMETHEUS_MULTIPROC_DIR), tracing only (the SDK's
batch processor and OTLP/HTTP exporter, in this process as in a worker, to a collector
in another process), and both. Target: at most 10% more per effect with both on than
off. A run is timed whole, from its claim to its end: a traced run's effects are events
of its step's span, encoded and sent when the step ends, and the run's end waits for
that export (as a worker's does), so the export is inside the figure. The collector
counts the spans and events it receives (decoding each request) and the bench checks
that every traced run's effect events arrived: a collector's own work is not the
worker's, so it does not keep them.
"""

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

# multiprocess metrics, as bin/serve and deployments run them (read at import time)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-metrics-"))

from bench.setup_db import ROOT, raw_insert_floor, setup_django  # noqa: E402

MODES = ("bare", "off", "metrics", "tracing", "both")


def collector():
    """An OTLP/HTTP collector in a process of its own (tests/support/otlp.py). It stands
    for one on another host, so it runs at the lowest priority: on a 2-core machine its
    decoding would otherwise take CPU from the worker it measures."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.otlp", "--count"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.nice(19))
    return proc, proc.stdout.readline().strip()


def main(effects: int = 1000, repeats: int = 40):
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

    @agent("bench-effects", registry=registry)
    class Effects(Agent):
        def start(self, inputs):
            return {"n": inputs["n"]}

        def step(self, ctx, state):
            for i in range(state["n"]):
                ctx.call(noop, i)
            return Done({"n": state["n"]})

    otlp, endpoint = collector()

    def received() -> dict:
        with urllib.request.urlopen(f"{endpoint}/received", timeout=10) as answer:
            return json.load(answer)

    def observe_as(mode: str) -> bool:
        tracing.off()  # exports what the last mode left, then shuts its provider down
        traced = mode in ("tracing", "both")
        if traced:  # what tracing.start() builds from OTEL_EXPORTER_OTLP_ENDPOINT
            tracing.use(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
        if mode == "bare":
            observe.install(observe.Observer())
        else:
            install(metrics_on=mode in ("metrics", "both"))
        return traced

    store = database_store()
    config = WorkerConfig(owner="bench", lease_seconds=60, slice_seconds=math.inf)
    # As a worker process's: the tree's main freezes its heap before it forks the workers
    # (runs/worker/tree.py), so their collections do not walk Django's start-up objects.
    gc.freeze()
    floors, ours = [], {mode: [] for mode in MODES}
    ours_cpu = {mode: [] for mode in MODES}
    exported = []  # (spans, events) the collector received per traced run
    try:
        for repeat in range(repeats):
            floors.append(raw_insert_floor(url, effects))
            # each mode first, second, ... in turn: no mode always runs right after
            # the floor's table was made and dropped
            for mode in MODES[repeat % len(MODES):] + MODES[:repeat % len(MODES)]:
                traced = observe_as(mode)
                before = received() if traced else {}
                run = control.launch(store, agent="bench-effects", inputs={"n": effects},
                                     registry=registry)
                start, cpu_start = time.perf_counter(), time.process_time()
                assert execute_run(store, run.id, config, registry=registry) == "succeeded"
                ours[mode].append((time.perf_counter() - start) / effects)
                # every thread of the process: the batch processor's export included
                ours_cpu[mode].append((time.process_time() - cpu_start) / effects)
                if traced:
                    assert tracing.flush(30), "the collector did not answer"
                    after = received()
                    exported.append((after["spans"] - before["spans"],
                                     after["events"] - before["events"]))
    finally:
        observe_as("bare")
        tracing.off()
        otlp.stdin.close()
        otlp.wait(10)
    report(effects, repeats, floors, ours, ours_cpu, exported)


def report(effects, repeats, floors, ours, ours_cpu, exported) -> None:
    floor = statistics.median(floors)
    per_effect = {mode: statistics.median(values) for mode, values in ours.items()}
    bare, off = per_effect["bare"], per_effect["off"]
    print(f"raw floor (INSERT+COMMIT, autocommit): {floor * 1000:.3f} ms/row "
          f"(min {min(floors) * 1000:.3f}, max {max(floors) * 1000:.3f})")
    print(f"agentops ctx.call, no-op idempotent tool: {bare * 1000:.3f} ms/effect "
          f"(min {min(ours['bare']) * 1000:.3f}, max {max(ours['bare']) * 1000:.3f}), "
          f"{1 / bare:.0f} effects/s (a run timed whole: claim, {effects} calls, end)")
    print(f"ratio agentops/floor: {bare / floor:.2f}x  (target <= 2x)")
    print(f"observability, {effects} effects x {repeats} repeats per mode, interleaved "
          f"(order rotated):")
    # Each repeat's modes ran back to back: a mode's ratio to "off" within the same
    # repeat cancels the machine's slower and faster minutes (PostgreSQL's checkpoints,
    # other processes); the median of those paired ratios is the figure.
    paired = {mode: sorted(value / base for value, base in zip(ours[mode], ours["off"]))
              for mode in MODES}
    for mode in MODES:
        values, ratios = ours[mode], paired[mode]
        quarter = len(ratios) // 4
        print(f"  {mode:8s} {per_effect[mode] * 1000:.3f} ms/effect (min {min(values) * 1000:.3f}, "
              f"max {max(values) * 1000:.3f})  {statistics.median(ratios):.3f}x off "
              f"(middle half of the repeats {ratios[quarter]:.3f}-{ratios[-quarter - 1]:.3f}x), "
              f"+{(per_effect[mode] - off) * 1e6:.0f} us")
    # CPU time is steadier than wall time on a shared machine (a host's other tenants
    # stretch the wall time of a repeat by a fifth either way; its CPU time hardly moves)
    cpu_off = statistics.median(ours_cpu["off"])
    print("CPU of the worker process (every thread, the span export included), "
          "median of the repeats:")
    for mode in MODES:
        median = statistics.median(ours_cpu[mode])
        print(f"  {mode:8s} {median * 1e6:6.1f} us/effect  +{(median - cpu_off) * 1e6:.1f} us "
              f"({median / cpu_off:.3f}x off)")
    spans, events = [s for s, _ in exported], [e for _, e in exported]
    print(f"exported per traced run: {min(spans)} to {max(spans)} spans (a launch, a claim, "
          f"a step) with {min(events)} to {max(events)} events (its {effects} effects)")
    assert min(events) >= effects, "a traced run's effect events did not all arrive"
    print(f"ratio both/off: {statistics.median(paired['both']):.3f}x, the median of "
          f"{repeats} paired repeats  (target <= 1.10x)")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
