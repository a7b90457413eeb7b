"""Two worker trees serving two codes of one agent (a deploy's two versions side by
side, docs/deploys.md): how long each run waits for a worker of its own code.

    python -m bench.runtime_codes [RUNS]

Two trees of one worker process each, as two hosts. RUNS runs (half of each code, in
turn), each of three steps of a 50 ms call, launched at once, then one at a time (each
after the previous one ended: the trees idle at every launch). Per run: from its launch
to its first effect, and to its end.

Baseline in the same process: the same runs, all of one code, on two trees that both
serve it (any worker may take any run).
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.setup_db import ROOT, setup_django

AGENT = '''"""The `codes` agent of bench/runtime_codes.py: one module per code."""
from runs.durable import Agent, Done, agent
from tests.workload_agents import pause_for


@agent("codes", version="1")
class Codes(Agent):
    def start(self, inputs):
        return {"i": 0}

    def step(self, ctx, state):
        ctx.call(pause_for, 0.05)
        state["i"] += 1
        return Done({"steps": state["i"]}) if state["i"] == 3 else state
'''
MODULES = ("bench_codes_a", "bench_codes_b")


def start_tree(tmp: Path, module: str):
    """A tree of one worker that serves `module`'s code, as bench.recovery starts one."""
    from tests.support.processes import Cluster

    return Cluster(tmp, workers=1, name=module, AGENTOPS_AGENT_MODULES=module,
                   PYTHONPATH=f"{ROOT}{os.pathsep}{tmp}")


def launch(registry) -> str:
    from runs.durable import control
    from runs.services import store

    return control.launch(store(), agent="codes", inputs={}, registry=registry).id


def main(runs: int = 40):
    setup_django()
    tmp = Path(tempfile.mkdtemp(prefix="agentops-codes-"))
    for module in MODULES:
        (tmp / f"{module}.py").write_text(AGENT)
    sys.path.insert(0, str(tmp))
    registries = {module: registry_of(module) for module in MODULES}
    for spaced in (False, True):
        how = "one at a time" if spaced else "at once"
        one = scenario(tmp, [MODULES[0], MODULES[0]], [registries[MODULES[0]]], runs, spaced)
        report(f"baseline: two trees of one code, launched {how}", one)
        two = scenario(tmp, list(MODULES), list(registries.values()), runs, spaced)
        report(f"two trees of two codes, launched {how}", two)
        print(f"two codes / one code, launched {how}: first effect "
              f"{two['first'] / one['first']:.2f}x, end {two['end'] / one['end']:.2f}x "
              f"(medians)", flush=True)


def registry_of(module: str):
    import importlib

    from runs.durable import AgentRegistry

    registry = AgentRegistry()
    registry.register(importlib.import_module(module).Codes)
    return registry


def scenario(tmp: Path, modules: list[str], registries: list, runs: int,
             spaced: bool) -> dict:
    """Trees of `modules`; `runs` runs of each registry's code in turn, launched at once
    or (`spaced`) each once the previous one ended."""
    from runs.models import Run
    from tests.support.processes import wait_until

    trees = [start_tree(tmp, module) for module in modules]
    try:
        for tree in trees:
            wait_until(tree.tree_ready, 60, message="whole trees")
        time.sleep(3.0)  # every tree's heartbeat has advertised its code
        start = time.time()
        launched, tree_of = {}, {}
        for i in range(runs):
            at = time.time()
            run_id = launch(registries[i % len(registries)])
            launched[run_id], tree_of[run_id] = at, trees[i % len(registries)]
            if spaced:
                wait_until(lambda run_id=run_id: Run.objects.filter(
                    pk=run_id, status="succeeded").exists(), 30, interval=0.02,
                    message="the run's end")
        wait_until(lambda: Run.objects.filter(pk__in=list(launched), status="succeeded")
                   .count() == runs, 120, interval=0.05, message="every run's end")
        return measure(launched) | {"wall": time.time() - start,
                                    "astray": astray(tree_of, len(registries))}
    finally:
        for tree in trees:
            tree.stop()


def astray(tree_of: dict, codes: int) -> int:
    """Runs with an effect made by a worker of another code than theirs (0: the setup
    holds; with one code any tree's worker is the run's own)."""
    from runs.models import Effect

    if codes == 1:
        return 0
    pids = {run_id: set(tree.worker_pids()) for run_id, tree in tree_of.items()}
    workers = Effect.objects.filter(run_id__in=list(tree_of)).values_list("run_id", "worker")
    return len({run_id for run_id, worker in workers
                if int(worker.split(":")[1]) not in pids[run_id]})


def measure(launched: dict) -> dict:
    from django.db.models import Min

    from runs.models import Effect, Run

    firsts = dict(Effect.objects.filter(run_id__in=list(launched)).values("run_id")
                  .annotate(first=Min("started_at")).values_list("run_id", "first"))
    ends = dict(Run.objects.filter(pk__in=list(launched)).values_list("id", "finished_at"))
    first = [firsts[r].timestamp() - t for r, t in launched.items()]
    end = [ends[r].timestamp() - t for r, t in launched.items()]
    return {"first": statistics.median(first), "first_max": max(first),
            "end": statistics.median(end), "end_max": max(end), "n": len(launched)}


def report(label: str, m: dict) -> None:
    print(f"{label}: {m['n']} runs; launch to first effect median {m['first'] * 1000:.0f} ms "
          f"(max {m['first_max'] * 1000:.0f}), to the run's end median {m['end']:.2f} s "
          f"(max {m['end_max']:.2f}); all done in {m['wall']:.2f} s; runs a worker of "
          f"another code ran: {m['astray']}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
