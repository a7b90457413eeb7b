"""The public API for writing agents and tools, and the registry that finds them."""

from typing import ClassVar

import pytest

from runs.durable import (
    Agent,
    AgentNotFoundError,
    AgentRegistry,
    Done,
    InputValidationError,
    Retry,
    Tool,
    agent,
    tool,
    validate_inputs,
)
from runs.durable.registry import NO_RETRY, FunctionAgent


@pytest.fixture
def reg():
    return AgentRegistry()


def test_the_class_form_registers_under_its_name(reg):
    @agent("crawl", version="3", description="Crawl a site", registry=reg)
    class Crawl(Agent):
        checkpoint_every = 5

        def step(self, ctx, state):
            return Done(state)

    assert reg.names() == ["crawl"]
    found = reg.get("crawl")
    assert isinstance(found, Crawl)
    assert (Crawl.name, Crawl.version, Crawl.description, Crawl.checkpoint_every) == (
        "crawl", "3", "Crawl a site", 5)
    assert found.start({"a": 1}) == {"a": 1}  # the default first snapshot: the inputs
    assert not found.has_on_resume()


def test_a_class_with_on_resume_says_so(reg):
    @agent("careful", registry=reg)
    class Careful(Agent):
        def on_resume(self, ctx, state):
            return state

    assert reg.get("careful").has_on_resume()


def test_the_function_form_is_one_step_returning_the_output(reg):
    @agent("hello", registry=reg)
    def hello(ctx, inputs):
        """Say hello.

        More text that is not the description."""
        return {"greeting": f"hello, {inputs['name']}"}

    assert hello({}, {"name": "direct"}) == {"greeting": "hello, direct"}  # still the function
    found = reg.get("hello")
    assert isinstance(found, FunctionAgent)
    assert type(found).description == "Say hello."
    assert type(found).version == "1"
    state = found.start({"name": "Ada"})
    assert found.step(None, state) == Done({"greeting": "hello, Ada"})


def test_a_version_is_kept_as_a_string(reg):
    @agent("v", version=2, registry=reg)
    def v(ctx, inputs):
        return None

    assert type(reg.get("v")).version == "2"


def test_an_unknown_agent_is_reported(reg):
    with pytest.raises(AgentNotFoundError) as caught:
        reg.get("nope")
    assert caught.value.name == "nope" and "'nope'" in str(caught.value)


def test_a_name_cannot_be_taken_twice_by_different_agents(reg):
    @agent("twice", registry=reg)
    def first(ctx, inputs):
        return 1

    with pytest.raises(ValueError, match=r"'twice' is taken by .*first"):
        @agent("twice", registry=reg)
        def second(ctx, inputs):
            return 2

    assert type(reg.get("twice")).__qualname__.endswith("first")


def test_a_class_agent_must_subclass_agent(reg):
    with pytest.raises(TypeError, match="must subclass Agent"):
        @agent("plain", registry=reg)
        class Plain:
            pass

    assert reg.names() == []


def test_a_tool_is_named_by_its_module_and_qualname():
    @tool
    def fetch(url):
        return url

    assert isinstance(fetch, Tool)
    assert fetch.name == f"{__name__}.test_a_tool_is_named_by_its_module_and_qualname.<locals>.fetch"
    assert fetch("x") == "x"  # callable directly, outside a run
    assert not fetch.idempotent and fetch.retry == NO_RETRY
    assert tool(name="custom")(lambda: 1).name == "custom"


def test_an_idempotent_tool_must_accept_the_key():
    with pytest.raises(TypeError, match="must accept idempotency_key"):
        @tool(idempotent=True)
        def post(record):
            return record

    @tool(idempotent=True)
    def put(record, *, idempotency_key):
        return idempotency_key

    assert put.idempotent
    assert put.retry == Retry()  # idempotent tools are retried by default: it is safe
    assert put.retry.maximum_attempts == 3


def test_a_retry_policy_can_be_given_and_backs_off_exponentially():
    @tool(retry=Retry(maximum_attempts=5, initial_interval=0.1, maximum_interval=0.3,
                      jitter=0))
    def send(to):
        return to

    assert send.retry.maximum_attempts == 5
    assert [send.retry.backoff(n) for n in (1, 2, 3, 4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])


class WithSchema(Agent):
    input_schema: ClassVar[dict] = {
        "type": "object", "required": ["url"],
        "properties": {"url": {"type": "string", "minLength": 1},
                       "depth": {"type": "integer", "minimum": 0, "default": 2},
                       "polite": {"type": "boolean", "default": True}}}


def test_validate_inputs_applies_defaults_without_overriding_given_values():
    assert validate_inputs(WithSchema, {"url": "https://x"}) == {
        "url": "https://x", "depth": 2, "polite": True}
    assert validate_inputs(WithSchema, {"url": "https://x", "depth": 0}) == {
        "url": "https://x", "depth": 0, "polite": True}
    assert validate_inputs(WithSchema(), {"url": "u", "extra": [1]})["extra"] == [1]


@pytest.mark.parametrize("inputs,field", [
    ({}, ""), ({"url": ""}, "url"), ({"url": "u", "depth": -1}, "depth"),
    ({"url": "u", "polite": "yes"}, "polite")])
def test_validate_inputs_names_the_failing_field(inputs, field):
    with pytest.raises(InputValidationError) as caught:
        validate_inputs(WithSchema, inputs)
    assert caught.value.field == field


@pytest.mark.parametrize("inputs", [None, [], "url=x", 1])
def test_validate_inputs_wants_an_object(inputs):
    with pytest.raises(InputValidationError, match="inputs must be a JSON object"):
        validate_inputs(WithSchema, inputs)


def test_an_agent_without_a_schema_takes_any_object():
    assert validate_inputs(Agent, {"anything": 1}) == {"anything": 1}


def test_an_invalid_schema_is_reported_as_the_agents_fault():
    class Broken(Agent):
        input_schema: ClassVar[dict] = {"type": "object", "properties": {"n": {"type": "number",
                                                                              "minimum": "zero"}}}

    with pytest.raises(InputValidationError, match="agent input schema is invalid"):
        validate_inputs(Broken, {"n": 1})
