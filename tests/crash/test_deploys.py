"""Deploys of new agent code with runs in flight, on real worker trees (docs/deploys.md).

Tree A runs deploy 1 of the `deployer` agent (tests/deploy_agents/), tree B deploy 2 (a
compatible change, version bumped), tree C deploy 3 (incompatible: a call more per
step). Each unit of work reaches the sandbox's idempotent records API; a unit written
twice (under two keys) would show as two records.
"""

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runs.durable import AgentRegistry, control
from runs.durable import records as r
from runs.models import Effect, Run, RunEvent, WorkerHeartbeat
from runs.services import store
from tests.crash.helpers import (
    assert_consistent,
    assert_outside_world_clean,
    holder_pid,
    wait_final,
)
from tests.support.processes import (
    COMMAND_DEADLINE,
    ROOT,
    RUNS_END_DEADLINE,
    TREE_DEADLINE,
    process_env,
    wait_until,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

STEPS = 24
HOLD_AT = 6  # the step at which gated runs wait (launch's gate)


def deploy(n: int) -> tuple[str, AgentRegistry]:
    """The module of deploy `n` and a registry holding its agent, as its web tier has it."""
    module = f"tests.deploy_agents.deployer_v{n}"
    registry = AgentRegistry()
    registry.register(importlib.import_module(module).Deployer)
    return module, registry


def launch(registry, count: int, delay: float = 0.3, gate: Path | None = None) -> list[str]:
    """`gate`: each run waits at step HOLD_AT until the test opens it (open_gate)."""
    inputs = {"steps": STEPS, "delay": delay}
    if gate is not None:
        inputs |= {"gate": str(gate), "hold_at": HOLD_AT}
    return [control.launch(store(), agent="deployer", inputs=inputs, registry=registry).id
            for _ in range(count)]


def held(run_ids) -> bool:
    """Every run is at its gate, or on its way there with nothing left to call before it:
    mid-run, its history saying what its code does. (The progress of the step before
    the gate is written with the next call's outcome, the gate's, once it opens.)"""
    runs = Run.objects.filter(pk__in=run_ids)
    return runs.count() == len(run_ids) and all(
        run.progress_done >= HOLD_AT - 1 and run.status == r.RUNNING for run in runs)


def open_gate_once_stopping(tree, gate: Path) -> None:
    """The deploy has stopped `tree` (its heartbeat says so): its runs' gate opens, and
    each hands itself back at its next call. Opened earlier, a run could go on and end
    on the old tree before that tree saw the signal."""
    wait_until(lambda: WorkerHeartbeat.objects.filter(pid=tree.pid, stopping=True).exists(),
               30, message="the old tree says it is stopping")
    gate.touch()


def tree(start_cluster, server, n: int, name: str):
    module, _ = deploy(n)
    return start_cluster(workers=2, name=name, AGENTOPS_AGENT_MODULES=module,
                         AGENTOPS_SANDBOX_URL=f"{server.url}/sandbox")


def in_flight(run_ids) -> bool:
    """Every run has written units (so its history says what its code does) and none
    is near its end."""
    runs = Run.objects.filter(pk__in=run_ids)
    return runs.count() == len(run_ids) and all(
        2 <= run.progress_done < STEPS - 4 and run.status not in r.FINAL_STATUSES
        for run in runs)


def moves(run_id: str) -> list[dict]:
    return [e.data for e in RunEvent.objects.filter(run_id=run_id, kind="version")]


def statuses(run_id: str) -> set[str]:
    return {e.data.get("status") for e in RunEvent.objects.filter(run_id=run_id, kind="status")}


def replay_check(module: str, *args: str) -> subprocess.CompletedProcess:
    env = process_env(AGENTOPS_AGENT_MODULES=module)
    return subprocess.run([sys.executable, "manage.py", "runs", "replay-check",
                           "--agent", "deployer", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=COMMAND_DEADLINE)


def test_a_rolling_deploy_of_compatible_code_moves_every_run_without_an_operator(
        server, start_cluster, tmp_path):
    # The new tree comes up beside the old one (a rolling deploy), and the old tree
    # keeps its own runs: both trees are up before the runs start, so that every run
    # is in flight on the old tree when the deploy stops it (held at its gate).
    a = tree(start_cluster, server, 1, "a")
    tree(start_cluster, server, 2, "b")
    _, v1 = deploy(1)
    gate = tmp_path / "gate"
    old = launch(v1, 20, gate=gate)
    wait_until(lambda: held(old), TREE_DEADLINE, message="20 runs in flight, at their gate")
    assert not any(moves(run_id) for run_id in old)  # pinned to their tree while it lives
    _, v2 = deploy(2)
    new = launch(v2, 5)  # launched by the new deploy's web tier while both trees run
    check = replay_check(deploy(2)[0])
    assert check.returncode == 0, check.stdout + check.stderr  # v2 replays them all
    a.signal(signal.SIGTERM)  # the deploy stops the old tree: its runs hand themselves back
    open_gate_once_stopping(a, gate)
    runs = wait_final(old + new, timeout=RUNS_END_DEADLINE, resolve_in_doubt=False)
    for run in runs.values():
        assert (run.status, run.output, run.agent_version) == (r.SUCCEEDED, {"units": STEPS},
                                                               "2"), (run.status, run.attention)
        assert r.NEEDS_ATTENTION not in statuses(run.id)
        assert_consistent(run)
    moved = {run_id: moves(run_id) for run_id in old}
    assert all(len(m) == 1 and m[0]["how"] == "replay" and m[0]["from_version"] == "1"
               for m in moved.values()), moved
    assert any(m[0]["step"] > 0 for m in moved.values())  # mid-run, where each stood
    assert not any(moves(run_id) for run_id in new)  # the old tree never took a new run
    per_unit = assert_outside_world_clean(old + new)
    assert len(per_unit) == 25 * STEPS  # every unit of work arrived, once


def test_an_incompatible_deploy_waits_for_its_version_then_a_previewed_upgrade_finishes_it(
        server, start_cluster, tmp_path):
    from runs.durable import upgrade

    b = tree(start_cluster, server, 2, "b")
    tree(start_cluster, server, 3, "c")
    _, v2 = deploy(2)
    module3, v3 = deploy(3)
    gate = tmp_path / "gate"
    old = launch(v2, 8, gate=gate)
    wait_until(lambda: held(old), TREE_DEADLINE, message="8 runs in flight, at their gate")
    check = replay_check(module3, "--json")
    assert check.returncode == 1, check.stdout + check.stderr  # v3 diverges from them
    verdicts = json.loads(check.stdout)["runs"]
    assert {v["run_id"] for v in verdicts if not v["clean"]} >= set(old)
    new = launch(v3, 3)  # new launches run v3, on C, while B finishes its v2 runs
    wait_until(lambda: in_flight(new), 30, message="3 v3 runs in flight")
    assert not any(moves(run_id) for run_id in old + new)
    b.signal(signal.SIGTERM)
    open_gate_once_stopping(b, gate)

    def all_waiting():
        runs = Run.objects.filter(pk__in=old)
        return all(run.status == r.SUCCEEDED or (run.attention or {}).get("kind") == "version"
                   for run in runs)
    wait_until(all_waiting, TREE_DEADLINE, message="v2 runs finished or waiting for their version")
    waiting = list(Run.objects.filter(pk__in=old).exclude(status=r.SUCCEEDED))
    assert waiting, "B finished every run before it was stopped: nothing was left to wait"
    for run in waiting:
        assert run.status == r.QUEUED and run.agent_version == "2"
        assert run.attention["message"].startswith(
            "waiting for a worker with version 2: diverges at step 1, call 2")
    ids = [run.id for run in waiting]
    preview = upgrade.preview(store(), ids, registry=v3)
    assert (preview["clean"], preview["diverging"]) == (0, len(ids))
    assert preview["effects_dropped"] == 0
    result = upgrade.upgrade_many(store(), ids, actor="ops", reason="deploy 3", registry=v3)
    assert result == {"upgraded": ids, "failed": {}}
    runs = wait_final(old + new, timeout=RUNS_END_DEADLINE, resolve_in_doubt=False)
    for run in runs.values():
        assert run.status == r.SUCCEEDED, (run.status, run.attention)
        assert_consistent(run)
    per_unit = assert_outside_world_clean(old + new)
    written = {u for u in per_unit if "-announce-" not in u}
    assert len(written) == 11 * STEPS  # every unit once; v3's announcements are new work


def test_workers_lost_after_progress_each_time_are_no_crash_loop(server, start_cluster):
    # A hand-off that outlives its lease, a lease keeper starved under load: the run's
    # next claim finds its lease run out, as after a crash. Here its worker is killed
    # three times before its first checkpoint (one at its end), each time after it
    # logged something new: the crash-loop guard counts takeovers without progress only.
    cluster = start_cluster(workers=1, AGENTOPS_AGENT_MODULES="tests.deploy_agents.unsaved",
                            AGENTOPS_SANDBOX_URL=f"{server.url}/sandbox")
    registry = AgentRegistry()
    registry.register(importlib.import_module("tests.deploy_agents.unsaved").Unsaved)
    run_id = control.launch(store(), agent="unsaved", inputs={"steps": 30, "delay": 0.2},
                            registry=registry).id
    outcomes = Effect.objects.filter(run_id=run_id, step_no__gt=0, status__in=["done", "error"])
    for kill in range(3):
        logged = outcomes.count()
        wait_until(lambda logged=logged: outcomes.count() > logged and holder_pid(run_id) in
                   cluster.worker_pids(), TREE_DEADLINE, message=f"progress before kill {kill + 1}")
        os.kill(holder_pid(run_id), signal.SIGKILL)
    wait_until(lambda: Run.objects.get(pk=run_id).status in (*r.FINAL_STATUSES,
                                                              r.NEEDS_ATTENTION),
               RUNS_END_DEADLINE, message="the run to finish")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.output, run.step_no) == (r.SUCCEEDED, {"units": 30}, 30), \
        run.attention
    resumes = [e.data for e in RunEvent.objects.filter(run_id=run_id, kind="status")
               if e.data.get("after") == "crash"]
    assert len(resumes) == 3 and all(e["resumed_from"] == 1 for e in resumes)  # the start's
    assert_consistent(run)
    assert len(assert_outside_world_clean([run_id])) == 30
