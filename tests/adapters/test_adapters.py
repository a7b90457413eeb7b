"""Both adapters on the in-memory store, against the sandbox's scripted model (its real
code, behind an httpx transport): the same answer as the SDK run plainly, a crash at
every effect boundary replays without repeating a logged call (nor counting a model
request's usage twice), non-idempotent tools go in doubt and take an operator's answer
as the tool's result, a tool may ask a person, and the app runs without the SDKs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections import Counter

import httpx
import pytest

from runs.adapters import NoIdempotencyKeyError, durable, idempotency_key
from runs.durable import AgentRegistry, Outcome, WorkerConfig, control, execute_run
from runs.durable import records as r
from runs.durable.faults import faults
from runs.durable.memory import MemoryStore
from tests import adapter_agents as agents
from tests.adapter_agents import scripted
from tests.durable.agents_for_tests import SimulatedCrash
from tests.support.processes import ROOT
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()

INPUTS = {"prompt": "How many pages mention a boat?", "follow_ups": ["And the old city?"],
          "delay": 0.0}
BUILD = {"test_pydantic": (agents.build_pydantic, agents.plain_pydantic),
         "test_openai": (agents.build_openai, agents.plain_openai)}
LEASE = 5.0
# The model's answer citing an operator's {"id": 42} for write_note: Pydantic AI gives the
# model a tool's result as JSON; the Agents SDK as str(result) when it is not text (its
# tools return JSON text), which the scripted model quotes as it is.
NOTE_42 = {"test_pydantic": "a note with id 42", "test_openai": "a note with id {'id': 42}"}
PROMPT, COMPLETION = 2.5, 10.0  # the scripted model's price, dollars per million tokens


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * PROMPT + completion_tokens * COMPLETION) / 1e6 \
        if model == "scripted" else 0.0


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
    config = WorkerConfig(owner="w1", lease_seconds=LEASE, slice_seconds=60, price=price)
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
    check_ledger(store, run_id)


def check_ledger(store, run_id) -> dict:
    """Every logged model request's usage is on its effect, read from the SDK's response
    and priced, and the run's totals are their sum: each counted once, however often
    the step was replayed. Returns the run's totals."""
    requests = [e for e in store.history(run_id).effects
                if e.tool.endswith(("model_request", "model_call")) and e.status == r.DONE]
    assert requests
    for effect in requests:
        used = effect.result["usage"]
        assert effect.usage == {
            "model": "scripted", "prompt_tokens": used["input_tokens"],
            "completion_tokens": used["output_tokens"],
            "cost": pytest.approx(price("scripted", used["input_tokens"],
                                        used["output_tokens"]))}
        assert used["input_tokens"] > 0 and used["output_tokens"] > 0
    totals = store.load(run_id).run.usage
    assert totals == {"calls": len(requests),
                      "prompt_tokens": sum(e.usage["prompt_tokens"] for e in requests),
                      "completion_tokens": sum(e.usage["completion_tokens"] for e in requests),
                      "cost": pytest.approx(sum(e.usage["cost"] for e in requests))}
    return totals


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


def in_doubt_in_write_note(store, reg, run_id, world) -> r.RunRecord:
    """Run until a crash cuts write_note short (the note written, its result not
    logged), then until the run is in doubt about it."""
    hits = [0]

    def crash_in_write_note():
        if any(e["tool"] == "write_note" for e in agents.JOURNAL.entries
               if e["kind"] == "tool") and hits[0] == 0:
            hits[0] += 1
            raise SimulatedCrash("in write_note")

    faults.arm("after_effect_before_log", crash_in_write_note)
    done = run_to_end(store, reg, run_id, world, [])
    faults.disarm()
    assert done.status == r.NEEDS_ATTENTION, done.error and done.error['traceback']
    assert done.attention["kind"] == "in_doubt"
    assert done.attention["tool"] == "tool.write_note"
    return done


def writes() -> int:
    return sum(1 for e in agents.JOURNAL.entries if e.get("tool") == "write_note")


@pytest.mark.parametrize("name", list(BUILD))
def test_a_non_idempotent_tool_cut_short_is_in_doubt(name, world):
    store, reg = MemoryStore(), registry(non_idempotent={"write_note"})
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    held = in_doubt_in_write_note(store, reg, run.id, world)
    before = writes()
    # what the operator enters is the tool's result, as for any agent's call
    control.resolve_effect(store, run.id, seq=held.attention["seq"], resolution="done",
                           result={"id": 42}, actor="op", reason="it landed")
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert NOTE_42[name] in done.output["answers"][0]["answer"]
    # the in-doubt call was not made again; the follow-up's own note was
    assert writes() == before + 1


@pytest.mark.parametrize("name", list(BUILD))
def test_a_call_in_doubt_skipped_returns_null(name, world):
    store, reg = MemoryStore(), registry(non_idempotent={"write_note"})
    run = control.launch(store, agent=name, inputs=dict(INPUTS, follow_ups=[]), registry=reg)
    held = in_doubt_in_write_note(store, reg, run.id, world)
    control.resolve_effect(store, run.id, seq=held.attention["seq"], resolution="skip",
                           actor="op", reason="not needed")
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert writes() == 1


def test_a_run_started_before_plain_results_reads_its_log_as_it_was_written(world,
                                                                              monkeypatch):
    """A Pydantic AI run whose state has no plain_results (started before its tool calls
    logged what the tools returned) goes on logging and replaying {"result": r}, and
    takes an operator's answer of another shape as the tool's result."""
    from runs.adapters.pydantic_ai import DurablePydanticAgent

    start = DurablePydanticAgent.start
    monkeypatch.setattr(DurablePydanticAgent, "start", lambda self, inputs: {
        k: v for k, v in start(self, inputs).items() if k != "plain_results"})
    store, reg = MemoryStore(), registry(non_idempotent={"write_note"})
    run = control.launch(store, agent="test_pydantic", inputs=INPUTS, registry=reg)
    held = in_doubt_in_write_note(store, reg, run.id, world)
    control.resolve_effect(store, run.id, seq=held.attention["seq"], resolution="done",
                           result={"id": 42}, actor="op", reason="it landed")
    done = run_to_end(store, reg, run.id, world, [])  # its first step replayed
    assert done.status == r.SUCCEEDED, done.error
    assert NOTE_42["test_pydantic"] in done.output["answers"][0]["answer"]
    tools = [e for e in store.history(run.id).effects if e.tool.startswith("tool.")]
    assert len(tools) == 6
    assert all(list(e.result) == ["result"] for e in tools if e.resolution != "done")


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
        thread.join(60)  # past the barrier's 20 s: a pair that never met shows in the outcomes
    assert not any(thread.is_alive() for thread in threads), "a run never returned"
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


@pytest.mark.parametrize("name", list(BUILD))
def test_idempotency_key_in_a_non_idempotent_tool_is_an_error_that_names_the_tool(
        name, world, monkeypatch):
    monkeypatch.setattr(agents, "write_note", lambda *args: {"key": idempotency_key()})
    store, reg = MemoryStore(), registry(non_idempotent={"write_note"})
    run = control.launch(store, agent=name, inputs=dict(INPUTS, follow_ups=[]), registry=reg)
    done = run_to_end(store, reg, run.id, world, [])
    # A bug of the agent's code fails the call and the run, even with the Agents SDK,
    # which would make any other error of a function tool a message for the model.
    assert done.status == r.FAILED
    note = next(e for e in store.history(run.id).effects if e.tool == "tool.write_note")
    assert (note.status, note.error["type"]) == (r.ERROR, "NoIdempotencyKeyError")
    for said in (note.error["message"], done.error["message"]):
        assert "idempotency_key() was called in the tool 'write_note', which is " \
               "non_idempotent" in said
        assert "never retried silently" in said


def test_idempotency_key_outside_a_tool_call_is_the_same_error():
    with pytest.raises(NoIdempotencyKeyError, match="outside a tool call") as raised:
        idempotency_key()
    assert raised.value.tool is None
    assert isinstance(raised.value, RuntimeError)  # as the bare error it replaced


def lookup_agent(calls: list):
    """A Pydantic AI agent whose tool answers a first call with ModelRetry."""
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages, info):
        said = messages[-1].parts[-1].content  # the prompt, the retry's message, a result
        if isinstance(said, dict):
            return ModelResponse(parts=[TextPart(f"found {said['people']} people")])
        city = "Paris" if "try a real one" in str(said) else "Atlantis"
        return ModelResponse(parts=[ToolCallPart("lookup", {"city": city})])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def lookup(city: str) -> dict:
        calls.append(city)
        if city == "Atlantis":
            raise ModelRetry("no such city: try a real one")
        return {"city": city, "people": 2_100_000}

    return agent


@pytest.mark.parametrize("checkpoint", ["prompt", "request"])
def test_a_tools_model_retry_is_its_logged_failure_and_raised_again_on_replay(checkpoint,
                                                                                world):
    for nth in range(1, 20):
        calls = []
        reg = AgentRegistry()
        durable(lookup_agent(calls), name="lookup", version="1", registry=reg,
                checkpoint=checkpoint)
        store = MemoryStore()
        run = control.launch(store, agent="lookup", inputs={"prompt": "Paris?"}, registry=reg)
        crash_at("before_effect", nth)
        crashes = []
        done = run_to_end(store, reg, run.id, world, crashes)
        assert done.status == r.SUCCEEDED, (nth, done.error)
        assert done.output["answer"] == "found 2100000 people"
        assert calls == ["Atlantis", "Paris"]  # neither ran again once logged
        tools = [e for e in store.history(run.id).effects if e.tool == "tool.lookup"]
        assert [(e.status, e.error and e.error["type"]) for e in tools] == [
            (r.ERROR, "ModelRetryRequested"), (r.DONE, None)]
        assert tools[0].error["message"] == "no such city: try a real one"
        assert tools[1].result == {"city": "Paris", "people": 2_100_000}  # as returned
        if not crashes:
            break
    # three model requests and two tool calls: a crash before each in turn, then none
    assert nth == 6
