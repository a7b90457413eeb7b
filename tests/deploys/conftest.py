"""Runs of the versions contract's writer (tests/durable/agents_versions.py), made by the
real engine on the database store: launched and run on v1's code, then left where a
deploy finds them; and the code "on disk" (this process's agent registry) swapped for
a later deploy's.

  v1  REG        the writer as launched: posts a unit per step, then notes it
  v2  REG_V2     the same calls (a compatible change): v1's histories replay cleanly
  v3  REG_V3     an audit call before each post: v1's histories diverge at step 1, call 1
"""

from __future__ import annotations

import math

import pytest

from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.durable.registry import registry
from runs.operator.groups import ensure_operators_group
from runs.storage import database_store
from tests.durable.agents_for_tests import REG, WORLD, SimulatedCrash
from tests.durable.agents_versions import REG_V2, REG_V3

__all__ = ["REG", "REG_V2", "REG_V3"]

DIVERGES_AT_1 = ("waiting for a worker with version 1: diverges at step 1, call 1 "
                 "(tests.audit_unit where the history has tests.post_unit)")


@pytest.fixture(autouse=True)
def _fresh_world():
    WORLD.reset()
    yield
    WORLD.release.set()


@pytest.fixture
def code_on_disk(monkeypatch):
    """deploy(REG_V3): this process's agents (the CLI's, the pages', the API's) get the
    writer of that registry, as a process started from that deploy's code would."""
    def deploy(agents):
        monkeypatch.setitem(registry.agents, "writer", agents.agents["writer"])
    return deploy


@pytest.fixture
def ops(client, users):
    """A test client logged in as charlie, the operator."""
    ensure_operators_group()  # a transactional test's flush empties the group's permissions
    client.force_login(users["charlie"])
    return client


def config(owner: str = "deploy-test:1:v1") -> WorkerConfig:
    return WorkerConfig(owner=owner, lease_seconds=1000, slice_seconds=math.inf)


def launch(n: int = 6, owner=None) -> str:
    return control.launch(database_store(), agent="writer", inputs={"n": n}, registry=REG,
                          owner=str(owner.pk) if owner is not None else "").id


def handed_off(run_id: str, unit: int = 4) -> str:
    """v1 runs it until a deploy's SIGTERM lands in step `unit`: queued, on v1."""
    WORLD.flags["stop_after_post"] = unit
    outcome = execute_run(database_store(), run_id, config(), registry=REG,
                          stop_event=WORLD.stop_event)
    assert outcome == Outcome.HANDED_OFF, outcome
    WORLD.stop_event.clear()
    WORLD.flags.pop("stop_after_post")
    return run_id


def crashed(run_id: str, unit: int = 5) -> str:
    """v1's worker dies in step `unit`, after its post: running, its lease held."""
    WORLD.crash_plan["after_post"] = unit
    with pytest.raises(SimulatedCrash):
        execute_run(database_store(), run_id, config(), registry=REG)
    return run_id


def finished(run_id: str) -> str:
    assert execute_run(database_store(), run_id, config(), registry=REG) == Outcome.SUCCEEDED
    return run_id


def waiting_for_v1(run_id: str) -> str:
    """Handed off by v1, then handed back by a worker of v3 whose replay diverged."""
    handed_off(run_id)
    outcome = execute_run(database_store(), run_id, config("deploy-test:3:v3"), registry=REG_V3)
    assert outcome == Outcome.VERSION_WAIT, outcome
    return run_id


def moved_to_v2(run_id: str) -> str:
    """Handed off by v1, then taken over by a worker of v2 (a clean replay) to the end."""
    handed_off(run_id)
    outcome = execute_run(database_store(), run_id, config("deploy-test:2:v2"), registry=REG_V2)
    assert outcome == Outcome.SUCCEEDED, outcome
    return run_id
