"""The `deployer` agent's runs for bench/deploy.py: its deploys (tests/deploy_agents/),
launches, what makes a deploy of them wrong, and recorded histories in bulk."""

import ast
import importlib
import math
import os
import uuid
from collections import defaultdict

from bench.setup_db import execute_to_end

SOURCES = 2  # histories the engine records; the others are copies of theirs


def deploy(n: int):
    """The module of deploy `n` of the `deployer` agent, and a registry holding it."""
    from runs.durable import AgentRegistry

    module = f"tests.deploy_agents.deployer_v{n}"
    registry = AgentRegistry()
    registry.register(importlib.import_module(module).Deployer)
    return module, registry


def launch(registry, count: int, steps: int, delay: float) -> list[str]:
    from runs.durable import control
    from runs.services import store

    ids = []
    for _ in range(count):
        run = control.launch(store(), agent="deployer", inputs={"steps": steps, "delay": delay},
                             registry=registry)
        ids.append(run.id)
    return ids


def check(runs: dict, b_deploy: int, steps: int) -> list[str]:
    """What makes a fast deploy a wrong one (runs of deploy 1 that deploy `b_deploy` took
    over): a run not finished, a move that should (not) have happened, a unit of work
    written twice or missing."""
    from runs.models import RunEvent
    from tests.crash.helpers import assert_consistent

    want = ("succeeded", {"units": steps}, str(b_deploy))
    problems = [f"{run.id}: {run.status} {run.output} v{run.agent_version} {run.attention}"
                for run in runs.values()
                if (run.status, run.output, run.agent_version) != want]
    moves = defaultdict(list)
    for run_id, data in RunEvent.objects.filter(run_id__in=list(runs), kind="version") \
            .values_list("run_id", "data"):
        moves[run_id].append((data["how"], data["from_version"], data["to_version"]))
    expected = [("replay", "1", str(b_deploy))] if b_deploy != 1 else []
    problems += [f"{i}: moves {moves[i]}, expected {expected}" for i in runs
                 if moves[i] != expected]
    for run in runs.values():
        problems += _failed(assert_consistent, run)
    return problems + _failed(_each_unit_once, runs, steps)


def _each_unit_once(runs, steps: int) -> None:
    from tests.crash.helpers import assert_outside_world_clean

    per_unit = assert_outside_world_clean(list(runs))  # none twice...
    assert len(per_unit) == len(runs) * steps, \
        f"{len(per_unit)} units arrived, not {len(runs) * steps}"  # ... none missing


def _failed(assertion, *args) -> list[str]:
    try:
        assertion(*args)
    except AssertionError as exc:
        return [str(exc)[:500]]
    return []


def record_histories(server, count: int, effects: int) -> list[str]:
    """`SOURCES` runs of deploy 1 executed to their end in this process, and copies of
    their rows under new run ids: `count` histories of `effects` effects."""
    from runs.durable import WorkerConfig
    from runs.storage import database_store

    os.environ["AGENTOPS_SANDBOX_URL"] = f"{server.url}/sandbox"
    _, v1 = deploy(1)
    sources = launch(v1, SOURCES, effects // 2, 0.0)  # two effects a step
    config = WorkerConfig(owner="bench:0:histories", lease_seconds=60, slice_seconds=math.inf)
    for run_id in sources:
        execute_to_end(database_store(), run_id, config, v1)
    return sources + copy_runs(sources, count - len(sources))


def copy_runs(sources: list[str], count: int) -> list[str]:
    """`count` copies of the source runs' rows (run, checkpoints, effects), each under a
    new run id: its keys, and the digest of a call whose arguments name the run, made
    anew as a replay of the copy computes them (the copy's events are left out: a replay
    does not read them)."""
    from runs.durable.serde import digest
    from runs.models import Checkpoint, Effect, Run

    rows = {run["id"]: run for run in Run.objects.filter(pk__in=sources).values()}
    effects, checkpoints = defaultdict(list), defaultdict(list)
    for row in Effect.objects.filter(run_id__in=sources).values():
        effects[row["run_id"]].append(row)
    for row in Checkpoint.objects.filter(run_id__in=sources).values():
        checkpoints[row["run_id"]].append(row)
    assert all(row["status"] == "succeeded" for row in rows.values()), rows
    ids, new_runs, new_effects, new_checkpoints = [], [], [], []
    for k in range(count):
        src, new = sources[k % len(sources)], uuid.uuid4().hex
        ids.append(new)
        new_runs.append(Run(**{**rows[src], "id": new}))
        new_checkpoints += [Checkpoint(**{**c, "id": None, "run_id": new})
                            for c in checkpoints[src]]
        for e in effects[src]:
            row = {**e, "id": None, "run_id": new, "key": e["key"].replace(src, new)}
            if src in e["args_preview"]:  # post_record(f"{run_id}-{i}", i): digest anew
                assert digest(e["tool"], _args(e["args_preview"]), {}) == e["digest"], e
                row["args_preview"] = e["args_preview"].replace(src, new)
                row["digest"] = digest(e["tool"], _args(row["args_preview"]), {})
            new_effects.append(Effect(**row))
    Run.objects.bulk_create(new_runs, batch_size=1000)
    Checkpoint.objects.bulk_create(new_checkpoints, batch_size=5000)
    Effect.objects.bulk_create(new_effects, batch_size=5000)
    return ids


def _args(preview: str) -> tuple:
    """A call's arguments, from their preview (the deployer's are literals)."""
    return ast.literal_eval(f"({preview},)")
