"""The adapters' model requests stream: a live request's text reaches the run's `stream`
events (what the run page shows, docs/streaming.md) while the model is still writing
it, the logged response is the one the non-streamed request logs, and a replay streams
nothing again. Also: an SDK run that streams itself (a Pydantic AI capability watching
the run's events, `Runner.run_streamed`) works durably.

Against the sandbox's scripted model (its real code) behind an httpx transport that
streams its answers as the sandbox's endpoint does, a chunk per token."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import httpx
import pytest

from runs.adapters import durable, openai_agents
from runs.durable import AgentRegistry, Done, control
from runs.durable import records as r
from runs.durable.faults import faults
from runs.durable.memory import MemoryStore
from sandbox.openai_wire import parse_request
from sandbox.scripted_llm import complete, stream_chunks, tokens
from tests import adapter_agents as agents
from tests.adapter_agents import scripted
from tests.adapters.conftest import Clock, Records
from tests.adapters.test_adapters import INPUTS, crash_at, plain_answer, run_to_end
from tests.durable.agents_for_tests import SimulatedCrash
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()

BUILD = {"test_pydantic": agents.build_pydantic, "test_openai": agents.build_openai}
MODEL_EFFECTS = ("pydantic_ai.model_request", "openai_agents.model_call")
SSE = {"content-type": "text/event-stream"}
WAIT = 20  # seconds a paused answer waits for its text to reach the run's stream, at most


class WatchedStore(MemoryStore):
    """The in-memory store, telling whoever waits on `changed` of every commit made."""

    def __init__(self):
        super().__init__()
        self.changed = threading.Condition()
        self.logged: list[r.EffectRecord] = []  # effects of the commits made, in order
        self.streamed: list[dict] = []  # stream events of the commits made, in order

    def commit(self, run_id, epoch, commit):
        result = super().commit(run_id, epoch, commit)
        with self.changed:
            self.logged.extend(commit.effects)
            self.streamed.extend(data for kind, data in commit.events if kind == "stream")
            self.changed.notify_all()
        return result

    def wait_for_text(self, text: str) -> bool:
        """Whether an attempt's streamed text becomes `text` (within WAIT seconds)."""
        with self.changed:  # (the store's own lock is never taken under this one)
            return self.changed.wait_for(lambda: text in joined(self.streamed).values(), WAIT)


class PausingModel:
    """The scripted model streaming its answers, a chunk per token. An answer stops
    halfway until the run's stream holds its first half: the text reaches viewers while
    the model is still writing it, or the answer goes on after WAIT seconds and says so
    in `paused` (False)."""

    def __init__(self, store: WatchedStore):
        self.store = store
        self.paused: list[bool] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        chat = parse_request(json.loads(request.content))
        completion = complete(chat, created=0)
        if not chat.stream:
            return httpx.Response(200, json=completion)
        return httpx.Response(200, headers=SSE, content=self._events(chat, completion))

    async def _events(self, chat, completion):
        pieces = tokens(completion["choices"][0]["message"]["content"] or "")
        half = len(pieces) // 2
        for n, chunk in enumerate(stream_chunks(completion, include_usage=chat.include_usage)):
            if half and n == 1 + half:  # the role's chunk, then a chunk per token
                seen = await asyncio.get_running_loop().run_in_executor(
                    None, self.store.wait_for_text, "".join(pieces[:half]))
                self.paused.append(seen)
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"


def attempt_texts(store: MemoryStore, run_id: str) -> dict[tuple[str, str], str]:
    """The run's streamed text per (key, attempt), as the page puts it together from
    the run's `stream` events."""
    return joined([data for _, kind, data in store.events_after(run_id) if kind == "stream"])


def joined(stream_events: list[dict]) -> dict[tuple[str, str], str]:
    texts: dict[tuple[str, str], str] = {}
    for data in stream_events:
        text = texts.get((data["key"], data["attempt"]), "")
        assert data["offset"] == len(text), "a stream event out of place"
        texts[(data["key"], data["attempt"])] = text + data["text"]
    return texts


def logged_text(result: dict) -> str:
    """The text of a logged model response (either SDK's)."""
    parts = [p["content"] for p in result.get("parts", []) if p.get("part_kind") == "text"]
    for item in result.get("output", []):
        if item.get("type") == "message":
            parts += [c["text"] for c in item["content"] if c.get("type") == "output_text"]
    return "".join(parts)


def model_effects(store: MemoryStore, run_id: str) -> list[r.EffectRecord]:
    return [e for e in store.history(run_id).effects if e.tool in MODEL_EFFECTS]


@pytest.fixture
def world(monkeypatch):
    monkeypatch.setattr(agents, "POST", Records().post)
    monkeypatch.setattr(faults, "directory", "")
    agents.JOURNAL.entries.clear()
    clock = Clock()
    monkeypatch.setattr(time, "time", clock.time)
    faults.disarm()
    yield type("World", (), {"clock": clock})
    faults.disarm()


def registry(transport, *, capabilities=()) -> AgentRegistry:
    reg = AgentRegistry()
    for name, build in BUILD.items():
        sdk_agent = build("http://scripted/v1", transport)
        if name == "test_pydantic":
            if capabilities:  # the same agent, with these capabilities
                from pydantic_ai import Agent

                sdk_agent = Agent(sdk_agent.model, deps_type=dict,
                                  instructions=agents.INSTRUCTIONS,
                                  toolsets=sdk_agent.toolsets, capabilities=list(capabilities))
            extra = {"deps": agents.deps}
        else:
            extra = {"context": agents.deps}
        durable(sdk_agent, name=name, version="1", input_schema=agents.SCHEMA, registry=reg,
                **extra)
    return reg


def crash_once_answered(store: WatchedStore) -> list[int]:
    """Crash in the first checkpoint's commit after an answer (a model response with
    text) is logged: the step replays from its log. Returns [streamed events by then]."""
    crashed: list[int] = []

    def action():
        with store.changed:
            answered = any(e.tool in MODEL_EFFECTS and e.status == r.DONE
                           and logged_text(e.result) for e in store.logged)
            if answered and not crashed:
                crashed.append(len(store.streamed))
                raise SimulatedCrash("after the answer, before the step's checkpoint")

    faults.arm("after_checkpoint_before_event", action)
    return crashed


@pytest.mark.parametrize("name", list(BUILD))
def test_a_live_model_request_streams_its_text_to_the_run_as_the_model_writes_it(name, world):
    store = WatchedStore()
    model = PausingModel(store)
    reg = registry(httpx.MockTransport(model))
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert done.output["answer"] == plain_answer(name)

    # Both answers' first halves reached the run's stream while the model waited.
    assert model.paused == [True, True]
    streamed = attempt_texts(store, run.id)
    by_key = {key: text for (key, _), text in streamed.items()}
    assert len(by_key) == len(streamed)  # one attempt a call: nothing was cut short
    answers = [e for e in model_effects(store, run.id) if logged_text(e.result)]
    assert [logged_text(e.result) for e in answers] == \
        [a["answer"] for a in done.output["answers"]]
    # Each answer's text streamed whole, under its call's key, in batches (the half
    # while the model waited, the rest after): the calls that only ask for tools, none.
    assert by_key == {e.key: logged_text(e.result) for e in answers}
    for answer in answers:
        batches = [s for s in store.streamed if s["key"] == answer.key]
        assert len(batches) >= 2
        assert {(s["tool"], s["step"], s["seq"]) for s in batches} == \
            {(answer.tool, answer.step_no, answer.seq)}


# Fields of a logged model response that read the clock, so differ between two runs.
CLOCK_READINGS = frozenset({"timestamp", "request_timestamp", "duration"})


@pytest.mark.parametrize("name", list(BUILD))
def test_the_logged_response_is_the_one_the_unstreamed_request_logs(name, world, monkeypatch):
    """The same run with the SDK's model unable to stream (the adapters then make the
    non-streamed request, as before streaming): the same results at the same positions,
    byte for byte (the clock's readings aside: Pydantic AI's `timestamp` at the response,
    and from 1.x on its `request_timestamp` and `duration`)."""
    from agents import OpenAIChatCompletionsModel
    from pydantic_ai.models import Model
    from pydantic_ai.models.openai import OpenAIChatModel

    def logged_run() -> tuple[dict, dict]:
        monkeypatch.setattr(agents, "POST", Records().post)  # its notes its own ("rec-1")
        store = WatchedStore()
        reg = registry(httpx.MockTransport(PausingModel(store)))
        run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
        assert run_to_end(store, reg, run.id, world, []).status == r.SUCCEEDED
        results = {(e.step_no, e.seq): json.dumps(
            {k: v for k, v in e.result.items() if k not in CLOCK_READINGS}, sort_keys=True)
            for e in model_effects(store, run.id)}
        return results, attempt_texts(store, run.id)

    streamed, texts = logged_run()
    assert texts  # this run streamed
    with monkeypatch.context() as unstreamed:
        def not_offered(*args, **kwargs):
            raise NotImplementedError("no streaming here")

        unstreamed.setattr(OpenAIChatModel, "request_stream", Model.request_stream)
        unstreamed.setattr(OpenAIChatCompletionsModel, "stream_response", not_offered)
        plain, no_texts = logged_run()
    assert no_texts == {}  # and this one did not
    assert len(streamed) >= 8  # every model request of the run, each compared
    assert streamed == plain


@pytest.mark.parametrize("name", list(BUILD))
def test_a_replay_returns_the_logged_response_and_streams_nothing_again(name, world):
    expected = plain_answer(name)
    agents.JOURNAL.entries.clear()
    store = WatchedStore()
    reg = registry(httpx.MockTransport(PausingModel(store)))
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    crashed = crash_once_answered(store)
    crashes: list[str] = []
    done = run_to_end(store, reg, run.id, world, crashes)
    assert done.status == r.SUCCEEDED, done.error
    assert crashes and len(crashed) == 1
    assert done.output["answer"] == expected

    before, after = store.streamed[:crashed[0]], store.streamed[crashed[0]:]
    logged_before = {e.key: e for e in model_effects(store, run.id) if e.step_no == 1}
    first = next(e for e in logged_before.values() if logged_text(e.result))
    # The first answer streamed before the crash; its step replayed from the log after
    # it, asking for none of its responses again and streaming none of them again.
    assert "".join(s["text"] for s in before if s["key"] == first.key) == \
        logged_text(first.result)
    assert not [s for s in after if s["key"] in logged_before]
    assert {s["key"] for s in after} == \
        {e.key for e in model_effects(store, run.id) if e.step_no == 2 and
         logged_text(e.result)}
    served = [e["names"][0] for e in agents.JOURNAL.entries if e["kind"] == "model"]
    # every request sent once: none that was logged before the crash was sent again
    assert len(served) == len(set(served)) == len(model_effects(store, run.id))
    # Each call's text streamed once, in one attempt: the page shows no discarded text.
    texts = attempt_texts(store, run.id)
    assert len({key for key, _ in texts}) == len(texts) == 2


# --- SDK runs that stream themselves ----------------------------------------------------

def watching(texts: list[str]):
    """A Pydantic AI capability watching the run's events as a UI would (their text
    into `texts`): the SDK then streams every model request (`request_stream`), however
    the run is driven."""
    from pydantic_ai.capabilities import AbstractCapability

    @dataclasses.dataclass
    class Watch(AbstractCapability):
        async def wrap_run_event_stream(self, ctx, *, stream):
            async for event in stream:
                texts.append(_event_text(event))
                yield event

    return Watch()


def _event_text(event) -> str:
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def test_a_pydantic_ai_run_that_streams_its_requests_is_durable(world):
    store, texts = WatchedStore(), []
    reg = registry(httpx.MockTransport(PausingModel(store)), capabilities=[watching(texts)])
    run = control.launch(store, agent="test_pydantic", inputs=INPUTS, registry=reg)
    crashed = crash_once_answered(store)
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert crashed
    assert done.output["answer"] == plain_answer("test_pydantic")
    first, second = (a["answer"] for a in done.output["answers"])
    # The SDK's stream got each answer whole, as one chunk: the first answer live, and
    # again from the log when its step was replayed after the crash; then the second.
    assert [t for t in texts if t] == [first, first, second]
    # The viewers got each answer once, as the model wrote it.
    assert sorted(attempt_texts(store, run.id).values()) == sorted([first, second])


def test_a_pydantic_ai_run_stream_is_durable(world):
    """`agent.run_stream(...)` with the adapter's capability, in a step: the SDK's
    stream gets the answer whole (`request_stream`), the viewers as it is written; a
    crash mid-run replays the logged responses through the same stream."""
    from pydantic_ai.tool_manager import ToolManager

    from runs.adapters.pydantic_ai import _capability

    store = WatchedStore()
    reg = registry(httpx.MockTransport(PausingModel(store)))

    class RunStream(type(reg.get("test_pydantic"))):
        name = "test_pydantic_run_stream"

        async def _step(self, ctx, turn, state):
            with ToolManager.parallel_execution_mode("sequential"):
                async with self.agent().run_stream(
                        state["prompts"][0], deps=agents.deps(ctx.inputs),
                        capabilities=[_capability(self, turn)]) as result:
                    texts = [text async for text in result.stream_text(delta=True)]
                    return Done({"answer": await result.get_output(), "texts": texts})

    reg.register(RunStream)
    run = control.launch(store, agent=RunStream.name, inputs=dict(INPUTS, follow_ups=[]),
                         registry=reg)
    crash_at("before_effect", 4)  # after three calls: replayed through request_stream
    crashes: list[str] = []
    done = run_to_end(store, reg, run.id, world, crashes)
    assert done.status == r.SUCCEEDED, done.error
    assert crashes
    answer = done.output["answer"]
    assert answer == asyncio.run(agents.plain_pydantic(
        agents.build_pydantic("http://scripted/v1", httpx.MockTransport(scripted)),
        dict(INPUTS, follow_ups=[])))
    assert done.output["texts"] == [answer]
    assert list(attempt_texts(store, run.id).values()) == [answer]


def streamed_openai_agent(base):
    """The Agents SDK adapter's agent driven by `Runner.run_streamed` instead of
    `Runner.run`: a step per prompt, the raw text deltas it streams in the output."""

    class Streamed(base):
        name = "test_openai_streamed"

        async def _step(self, ctx, turn, state):
            from agents import RunConfig, Runner
            from pydantic_core import to_jsonable_python

            prompt = state["prompts"][state["current"]]
            items = [*state["items"], {"role": "user", "content": prompt}] \
                if state["items"] else prompt
            starting = openai_agents._find(self.agent(), state["agent"]) if state["agent"] \
                else self.agent()
            result = Runner.run_streamed(starting, items, context=agents.deps(ctx.inputs),
                                         run_config=RunConfig(tracing_disabled=True))
            deltas = [event.data.delta async for event in result.stream_events()
                      if event.type == "raw_response_event"
                      and event.data.type == "response.output_text.delta"]
            state["items"] = to_jsonable_python(result.to_input_list())
            state["agent"] = result.last_agent.name
            state["answers"].append({"answer": result.final_output, "deltas": deltas,
                                     "tokens": result.context_wrapper.usage.total_tokens})
            state["current"] += 1
            if state["current"] == len(state["prompts"]):
                return Done({"answer": result.final_output, "answers": state["answers"]})
            return state

    return Streamed


def test_an_agents_sdk_run_streamed_is_durable(world):
    store = WatchedStore()
    reg = registry(httpx.MockTransport(PausingModel(store)))
    streamed = streamed_openai_agent(type(reg.get("test_openai")))
    reg.register(streamed)
    run = control.launch(store, agent=streamed.name, inputs=INPUTS, registry=reg)
    crashed = crash_once_answered(store)
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, done.error
    assert crashed
    assert done.output["answer"] == plain_answer("test_openai")
    for answer in done.output["answers"]:
        # the SDK's stream: the answer whole, as one delta (the first one from the log,
        # its step replayed after the crash)
        assert answer["deltas"] == [answer["answer"]]
    # the usage the SDK adds up from the streamed responses: the unstreamed run's
    expected = asyncio.run(_plain_tokens())
    assert [a["tokens"] for a in done.output["answers"]] == expected
    assert sorted(attempt_texts(store, run.id).values()) == \
        sorted(a["answer"] for a in done.output["answers"])


async def _plain_tokens() -> list[int]:
    from agents import RunConfig, Runner

    agent = agents.build_openai("http://scripted/v1", httpx.MockTransport(scripted))
    items, starting, totals = None, agent, []
    for prompt in [INPUTS["prompt"], *INPUTS["follow_ups"]]:
        items = [*items, {"role": "user", "content": prompt}] if items else prompt
        result = await Runner.run(starting, items, context=agents.deps(INPUTS),
                                  run_config=RunConfig(tracing_disabled=True))
        items, starting = result.to_input_list(), result.last_agent
        totals.append(result.context_wrapper.usage.total_tokens)
    return totals


def test_the_bridge_hands_a_stream_to_the_engine_thread_and_ends_it_when_left():
    """`Bridge.stream`: the coroutine's pushes arrive in the reading thread in order,
    then its result; a stream left unread is cancelled on the SDK loop."""
    from runs.adapters.effects import Bridge

    bridge = Bridge()

    async def answer(push):
        for word in ("a", " streamed", " answer"):
            push(word)
        return {"done": True}

    chunks = bridge.stream(answer)
    assert [next(chunks), next(chunks), next(chunks)] == ["a", " streamed", " answer"]
    with pytest.raises(StopIteration) as end:
        next(chunks)
    assert end.value.value == {"done": True}

    started, cancelled = threading.Event(), threading.Event()

    async def endless(push):
        push("first")
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    chunks = bridge.stream(endless)
    assert next(chunks) == "first"
    assert started.wait(WAIT)
    chunks.close()
    assert cancelled.wait(WAIT)

