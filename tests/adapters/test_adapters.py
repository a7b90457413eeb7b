"""Both adapters on the in-memory store, against the sandbox's scripted model (its real
code, behind an httpx transport): the same answer as the SDK run plainly, a crash at
every effect boundary replays without repeating a logged call, non-idempotent tools
go in doubt, a tool may ask a person, and the app runs without the SDKs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter

import httpx
import pytest

from runs.adapters import durable
from runs.durable import AgentRegistry, Outcome, WorkerConfig, control, execute_run
from runs.durable import records as r
from runs.durable.faults import faults
from runs.durable.memory import MemoryStore
from tests import adapter_agents as agents
from tests.adapter_agents import scripted
from tests.durable.agents_for_tests import SimulatedCrash
from tests.support.processes import ROOT

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

INPUTS = {"prompt": "How many pages mention a boat?", "follow_ups": ["And the old city?"],
          "delay": 0.0}
BUILD = {"test_pydantic": (agents.build_pydantic, agents.plain_pydantic),
         "test_openai": (agents.build_openai, agents.plain_openai)}
LEASE = 5.0


class Records:
    """The sandbox's records API as the tools see it: one record per idempotency key."""

    def __init__(self):
        self.by_key: dict[str, dict] = {}

    def post(self, url, *, json, headers, timeout):
        record = self.by_key.setdefault(headers["Idempotency-Key"],
                                        {"id": f"rec-{len(self.by_key) + 1}", **json})
        return httpx.Response(201, json=record, request=httpx.Request("POST", url))


class Clock:
    def __init__(self):
        self.offset = 0.0

    def time(self):
        return REAL_TIME() + self.offset


REAL_TIME = time.time


@pytest.fixture
def world(monkeypatch):
    records = Records()
    monkeypatch.setattr(agents, "POST", records.post)
    monkeypatch.setattr(faults, "directory", "")
    agents.JOURNAL.entries.clear()
    clock = Clock()
    monkeypatch.setattr(time, "time", clock.time)
    faults.disarm()
    yield type("World", (), {"records": records, "clock": clock})
    faults.disarm()


def registry(checkpoint="prompt", **options) -> AgentRegistry:
    reg = AgentRegistry()
    transport = httpx.MockTransport(scripted)
    for name, (build, _) in BUILD.items():
        extra = {"deps": agents.deps, "checkpoint": checkpoint} if name == "test_pydantic" \
            else {"context": agents.deps}
        durable(build("http://scripted/v1", transport), name=name, version="1",
                input_schema=agents.SCHEMA, registry=reg, **extra, **options)
    return reg


def plain_answer(name: str):
    build, plain = BUILD[name]
    return asyncio.run(plain(build("http://scripted/v1", httpx.MockTransport(scripted)),
                             INPUTS))


def run_to_end(store, reg, run_id, world, crashes: list[str]) -> r.RunRecord:
    """Execute; after each simulated crash let the lease run out and go on."""
    config = WorkerConfig(owner="w1", lease_seconds=LEASE, slice_seconds=60)
    for _ in range(50):
        try:
            outcome = execute_run(store, run_id, config, registry=reg)
        except SimulatedCrash as crash:
            crashes.append(str(crash))
            world.clock.offset += LEASE + 1
            continue
        if outcome in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.NEEDS_ATTENTION,
                       Outcome.WAITING):
            return store.load(run_id).run
    raise AssertionError("the run did not end")


def crash_at(point: str, nth: int) -> None:
    hits = [0]

    def action():
        hits[0] += 1
        if hits[0] == nth:
            faults.disarm()
            raise SimulatedCrash(f"{point}#{nth}")

    faults.arm(point, action)


def check_nothing_repeated_after_its_log(store, run_id) -> None:
    effects = [(e.tool, e.key, e.status, e.finished_at, e.result)
               for e in store.history(run_id).effects if e.kind == r.CALL]
    agents.check_journal(agents.JOURNAL.entries, effects)


@pytest.mark.parametrize("name", list(BUILD))
def test_a_durable_run_answers_as_the_sdk_run_plainly(name, world):
    expected = plain_answer(name)
    agents.JOURNAL.entries.clear()
    store, reg = MemoryStore(), registry()
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert done.output["answer"] == expected
    assert len(done.output["answers"]) == 2
    effects = store.history(run.id).effects
    tools = Counter(e.tool for e in effects if e.tool.startswith("tool."))
    assert tools == {"tool.search_pages": 2, "tool.calculator": 2, "tool.write_note": 2}
    # Every tool ran once, under the key of its effect; every request was sent once.
    ran = [e["key"] for e in agents.JOURNAL.entries if e["kind"] == "tool"]
    assert sorted(ran) == sorted(e.key for e in effects if e.tool.startswith("tool."))
    served = [e["names"][0] for e in agents.JOURNAL.entries if e["kind"] == "model"]
    assert len(served) == len(set(served)) == sum(1 for e in effects if "model" in e.tool)
    check_nothing_repeated_after_its_log(store, run.id)
    if name == "test_openai":
        handoffs = [e for e in effects if e.tool == "agents.handoff"]
        assert [h.result for h in handoffs] == [{"from": "triage", "to": "researcher"}]


@pytest.mark.parametrize("point", ["before_effect", "after_effect_before_log",
                                   "after_checkpoint"])
@pytest.mark.parametrize("name", list(BUILD))
def test_a_crash_at_any_effect_boundary_replays_to_the_same_answer(name, point, world):
    expected = plain_answer(name)
    for nth in range(1, 40):
        agents.JOURNAL.entries.clear()
        store, reg = MemoryStore(), registry()
        run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
        crash_at(point, nth)
        crashes = []
        done = run_to_end(store, reg, run.id, world, crashes)
        assert done.status == r.SUCCEEDED, (nth, done.error, done.attention)
        assert done.output["answer"] == expected
        check_nothing_repeated_after_its_log(store, run.id)
        # one note per key at the target, and one key per note the run wrote
        notes = [e for e in store.history(run.id).effects if e.tool == "tool.write_note"]
        assert set(world.records.by_key) >= {e.key for e in notes}
        if not crashes:  # past the last boundary of this kind: every one was tried
            assert nth > 2
            break
    else:
        raise AssertionError("more boundaries than expected")


@pytest.mark.parametrize("name", list(BUILD))
def test_a_non_idempotent_tool_cut_short_is_in_doubt(name, world):
    store, reg = MemoryStore(), registry(non_idempotent={"write_note"})
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    hits = [0]

    def crash_in_write_note():
        if any(e["tool"] == "write_note" for e in agents.JOURNAL.entries
               if e["kind"] == "tool") and hits[0] == 0:
            hits[0] += 1
            raise SimulatedCrash("in write_note")

    faults.arm("after_effect_before_log", crash_in_write_note)
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.NEEDS_ATTENTION, done.error and done.error['traceback']
    assert done.attention["kind"] == "in_doubt"
    assert done.attention["tool"] == "tool.write_note"
    faults.disarm()
    writes = sum(1 for e in agents.JOURNAL.entries if e.get("tool") == "write_note")
    control.resolve_effect(store, run.id, seq=done.attention["seq"], resolution="done",
                           result={"result": {"id": "checked"}}, actor="op", reason="it landed")
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert "checked" in json.dumps(done.output["answers"][0])
    # the in-doubt call was not made again; the follow-up's own note was
    assert sum(1 for e in agents.JOURNAL.entries if e.get("tool") == "write_note") == writes + 1


@pytest.mark.parametrize("name", list(BUILD))
def test_a_tool_that_asks_a_person_waits_for_the_answer(name, world):
    store, reg = MemoryStore(), registry(input_tools={"write_note"})
    run = control.launch(store, agent=name, inputs=dict(INPUTS, follow_ups=[]), registry=reg)
    waiting = run_to_end(store, reg, run.id, world, [])
    assert waiting.status == r.WAITING
    assert waiting.attention["kind"] == "input"
    assert "Research" in waiting.attention["prompt"]  # the note the model wanted written
    assert not any(e.get("tool") == "write_note" for e in agents.JOURNAL.entries)
    control.provide_input(store, run.id, value={"id": "by-a-person"}, actor="alice")
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert "by-a-person" in done.output["answer"]


def test_runs_of_one_process_make_their_model_requests_at_the_same_time(world):
    """Two runs on two threads of one process: both first requests are in flight on the
    SDK loop at once (the scripted model answers only when both have arrived)."""
    both = threading.Barrier(2, timeout=20)

    async def together(request):
        await asyncio.get_running_loop().run_in_executor(None, both.wait)
        return scripted(request)

    reg = AgentRegistry()
    durable(agents.build_pydantic("http://scripted/v1", httpx.MockTransport(together)),
            name="together", version="1", input_schema=agents.SCHEMA, deps=agents.deps,
            registry=reg)
    store = MemoryStore()
    ids = [control.launch(store, agent="together", inputs={"prompt": "boats"},
                          registry=reg).id for _ in range(2)]
    config = WorkerConfig(owner="w1", lease_seconds=30, slice_seconds=60)
    outcomes = {}
    threads = [threading.Thread(target=lambda i=i: outcomes.__setitem__(
        i, execute_run(store, i, config, registry=reg))) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert outcomes == {i: Outcome.SUCCEEDED for i in ids}


def test_durable_refuses_what_is_not_an_sdk_agent():
    with pytest.raises(TypeError, match="pydantic_ai.Agent or an OpenAI Agents SDK"):
        durable(object(), name="x", version="1")


def test_the_app_imports_no_sdk_until_an_agent_is_wrapped():
    code = ("import sys, runs.adapters, runs.adapters.effects, runs.durable; "
            "assert 'pydantic_ai' not in sys.modules and 'agents' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_step_per_model_request_checkpoints_the_history_and_resumes_mid_prompt(world):
    expected = plain_answer("test_pydantic")
    for nth in range(1, 40):
        agents.JOURNAL.entries.clear()
        store, reg = MemoryStore(), registry(checkpoint="request")
        run = control.launch(store, agent="test_pydantic", inputs=INPUTS, registry=reg)
        crash_at("after_checkpoint", nth)
        crashes = []
        done = run_to_end(store, reg, run.id, world, crashes)
        assert done.status == r.SUCCEEDED, (nth, done.error)
        assert done.output["answer"] == expected
        check_nothing_repeated_after_its_log(store, run.id)
        if not crashes:
            break
    # A checkpoint after each model request, the start's besides, but the last (the run
    # ends there): eight, each a crash point once.
    assert nth == 1 + 8
    assert len(store.history(run.id).checkpoints) == 8
