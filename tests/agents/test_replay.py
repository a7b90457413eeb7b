"""Code changes and versions, on the engine's in-memory store.

A worker dies after some steps of a built-in agent have made their calls but
before they were checkpointed; a new worker resumes the run by replaying those
steps. With the same code the replay matches the log and the run finishes with
the output of an uninterrupted run. With changed code (the same declared version:
its fingerprint tells the change), the new worker replays the run's history before
it runs anything: the changed calls diverge, so the run is handed back for a
worker of its own code, saying where. A new version that makes the same calls
replays cleanly, and the run moves to it where it stands (docs/deploys.md).
"""

import math
import re
import time

import pytest

from builtin_agents.assistant import Assistant
from builtin_agents.crawl import Crawl
from builtin_agents.migrate import Migrate
from builtin_agents.tools import research
from runs.durable import AgentRegistry, Outcome, WorkerConfig, control, execute_run
from runs.durable.faults import faults
from runs.durable.memory import MemoryStore
from tests.durable.contract import Clock

LEASE = 30.0


class WorkerDied(BaseException):
    """The worker stops dead: no release, no checkpoint."""


# --- the same agents after a code change that kept the version ------------------------------
class CrawlHighestFirst(Crawl):
    """Someone made the crawl visit higher page numbers first."""

    def step(self, ctx, state):
        state["frontier"].sort(reverse=True)
        return super().step(ctx, state)


class MigrateKeepCents(Migrate):
    """Someone changed the transform to keep amounts in cents."""

    def transform(self, row):
        return {**super().transform(row), "amount": row["amount_cents"]}


class AssistantWithoutNotes(Assistant):
    """Someone took the write_note tool away."""

    tools = research.SPECS[:2]


class CrawlV2(Crawl):
    version = str(int(Crawl.version) + 1)


def registry(*classes) -> AgentRegistry:
    reg = AgentRegistry()
    for cls in classes:
        reg.register(cls)
    return reg


def inputs_for(name: str, sandbox: str) -> dict:
    return {
        "crawl": {"site_url": f"{sandbox}/site", "pages": 60, "latency_ms": 0,
                  "error_rate": 0.0, "batch": 2},
        "migrate": {"source_url": f"{sandbox}/dataset/rows", "target_url": f"{sandbox}/api",
                    "rows": 400, "batch_size": 100},
        "assistant": {"base_url": f"{sandbox}/llm/v1", "site_url": f"{sandbox}/site",
                      "target_url": f"{sandbox}/api", "latency_ms": 0, "search_scan": 12,
                      "chat": False},
    }[name]


CASES = {
    # agent: (original, changed) — every case dies in the transaction of the second
    # checkpoint, so the steps after the first one (step 0, or 20 for crawl) replay.
    "crawl": (Crawl, CrawlHighestFirst),
    "migrate": (Migrate, MigrateKeepCents),
    "assistant": (Assistant, AssistantWithoutNotes),
}


def die_at_second_checkpoint():
    hits = [0]

    def action():
        hits[0] += 1
        if hits[0] == 2:
            faults.disarm()
            raise WorkerDied()

    faults.arm("after_checkpoint_before_event", action)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The contract suite's clock: `time.time()` moved forward by the test, not waited for."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock.time)
    return clock


def run_until_crash(store, reg, name, sandbox, clock) -> str:
    run = control.launch(store, agent=name, inputs=inputs_for(name, sandbox), registry=reg)
    die_at_second_checkpoint()
    try:
        with pytest.raises(WorkerDied):
            execute_run(store, run.id, worker("w1"), registry=reg)
    finally:
        faults.disarm()
    clock.advance(LEASE + 1)  # the dead worker's lease runs out
    return run.id


def worker(owner: str) -> WorkerConfig:
    return WorkerConfig(owner=owner, lease_seconds=LEASE, slice_seconds=math.inf)


def finish(store, run_id, reg) -> str:
    outcome = Outcome.YIELDED
    while outcome == Outcome.YIELDED:
        outcome = execute_run(store, run_id, worker("w2"), registry=reg)
    return outcome


def normalised(output):
    """Note ids are the target's record ids: different in every run."""
    return re.sub(r"(note|id) \d+", r"\1 N", repr(output))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_code_replays_to_the_same_output(name, inproc_sandbox, clock):
    original, _ = CASES[name]
    store, reg = MemoryStore(), registry(original)
    reference = control.launch(store, agent=name, inputs=inputs_for(name, inproc_sandbox),
                               registry=reg)
    assert finish(store, reference.id, reg) == Outcome.SUCCEEDED
    run_id = run_until_crash(store, reg, name, inproc_sandbox, clock)
    assert finish(store, run_id, reg) == Outcome.SUCCEEDED
    resumed = store.get(run_id)
    assert normalised(resumed.output) == normalised(store.get(reference.id).output)
    assert resumed.step_no > 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_changed_code_with_the_same_version_is_caught_by_replay(name, inproc_sandbox, clock):
    original, changed = CASES[name]
    assert changed.version == original.version
    store = MemoryStore()
    run_id = run_until_crash(store, registry(original), name, inproc_sandbox, clock)
    assert finish(store, run_id, registry(changed)) == Outcome.VERSION_WAIT
    run = store.get(run_id)
    attention = run.attention
    assert attention["kind"] == "version", attention
    assert attention["message"].startswith(
        f"waiting for a worker with version {original.version}: diverges at step ")
    recorded, attempted = attention["divergence"]["recorded"], attention["divergence"]["attempted"]
    assert recorded["digest"] != attempted["digest"]
    assert attempted["tool"] == recorded["tool"]  # the same tool, called differently
    assert run.output is None
    # the run's own code finishes it, as if nothing had happened
    assert finish(store, run_id, registry(original)) == Outcome.SUCCEEDED


def test_a_new_version_that_makes_the_same_calls_takes_the_run_over(inproc_sandbox, clock):
    store = MemoryStore()
    run_id = run_until_crash(store, registry(Crawl), "crawl", inproc_sandbox, clock)
    assert finish(store, run_id, registry(CrawlV2)) == Outcome.SUCCEEDED
    run = store.get(run_id)
    assert (run.agent_version, run.branch) == (CrawlV2.version, 1)
    [moved] = [data for _, kind, data in store.events_after(run_id) if kind == "version"]
    assert (moved["from_version"], moved["to_version"], moved["how"]) == (
        Crawl.version, CrawlV2.version, "replay")
