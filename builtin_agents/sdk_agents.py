"""Agents written with an SDK, made durable in a line each (docs/adapters.md).

- ``pydantic_assistant``  a Pydantic AI agent with the assistant's three tools;
- ``openai_assistant``    the same as an OpenAI Agents SDK agent, with a hand-off
                          from a triage agent to the researcher.

Both talk to the sandbox's scripted OpenAI-compatible model by default (no network,
no key). Each is registered only when its SDK is installed (``pip install
'.[adapters]'``): the app runs without them.
"""

# No `from __future__ import annotations`: the SDKs read the tools' type hints, which
# name classes imported inside the functions below.
import importlib.util
import json
from dataclasses import dataclass

from .tools import crawl as site
from .tools import research
from .tools.http import sandbox_url
from .tools.llm import default_base_url, default_model

INSTRUCTIONS = (
    "You are a research assistant for a website. Use search_pages to find pages, calculator "
    "for any arithmetic and write_note to save what you found; then answer in a few sentences, "
    "citing the numbers your tools returned.")


def input_schema() -> dict:
    sandbox = sandbox_url()
    return {
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "format": "textarea", "minLength": 1,
                       "default": "Which pages mention a boat or the city, and how many are "
                                  "there?", "description": "What to ask."},
            "follow_ups": {"type": "array", "items": {"type": "string", "minLength": 1},
                           "default": [], "description": "Further questions, asked in turn "
                                                         "after each answer (a JSON list)."},
            "site_url": {"type": "string", "default": f"{sandbox}/site"},
            "site_pages": {"type": "integer", "minimum": 1, "default": 10_000},
            "latency_ms": {"type": "integer", "minimum": 0, "maximum": 10_000, "default": 20},
            "search_scan": {"type": "integer", "minimum": 1, "maximum": 2000, "default": 50},
            "target_url": {"type": "string", "default": f"{sandbox}/api",
                           "description": "Where write_note stores notes (<target_url>/records)."},
        },
    }


@dataclass
class Research:
    """What the tools need from the run's inputs (the agent's deps)."""

    site: str
    params: dict
    scan: int
    target: str

    @classmethod
    def from_inputs(cls, inputs: dict) -> "Research":
        return cls(site=inputs["site_url"].rstrip("/"),
                   params=site.site_params(inputs["site_pages"], inputs["latency_ms"], 0.0),
                   scan=inputs["search_scan"], target=inputs["target_url"].rstrip("/"))

    # The tools themselves, shared by both SDKs' agents: each call is one effect, and
    # the idempotency key of that effect dedups it at the target.
    def search_pages(self, query: str) -> dict:
        from runs.adapters import idempotency_key

        return research.search_pages.fn(self.site, self.params, self.scan, query,
                                        idempotency_key=idempotency_key())

    def write_note(self, title: str, body: str) -> dict:
        from runs.adapters import current_effect, idempotency_key

        key = idempotency_key()
        return research.write_note.fn(self.target, f"{current_effect().run_id}-note-{key}",
                                      title, body, idempotency_key=key)


def calculator(expression: str) -> dict:
    return {"expression": expression, "result": research.evaluate(expression)}


def pydantic_agent(base_url: str, model_name: str, api_key: str = "sandbox"):
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=base_url,
                                                                api_key=api_key))
    agent = Agent(model, deps_type=Research, instructions=INSTRUCTIONS, name="researcher")

    @agent.tool
    def search_pages(ctx: RunContext[Research], query: str) -> dict:
        """Search the site's pages for words; returns the best matches and how many matched."""
        return ctx.deps.search_pages(query)

    @agent.tool_plain(name="calculator")
    def calculator_tool(expression: str) -> dict:
        """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
        return calculator(expression)

    @agent.tool
    def write_note(ctx: RunContext[Research], title: str, body: str) -> dict:
        """Save a note for the user; returns its id."""
        return ctx.deps.write_note(title, body)

    return agent


def openai_agent(base_url: str, model_name: str, api_key: str = "sandbox"):
    from agents import Agent, OpenAIChatCompletionsModel, RunContextWrapper, function_tool
    from openai import AsyncOpenAI

    model = OpenAIChatCompletionsModel(model_name,
                                       AsyncOpenAI(base_url=base_url, api_key=api_key))

    # The SDK sends a tool's output to the model as text: JSON, as the model reads it.
    @function_tool
    def search_pages(ctx: RunContextWrapper[Research], query: str) -> str:
        """Search the site's pages for words; returns the best matches and how many matched."""
        return json.dumps(ctx.context.search_pages(query))

    @function_tool(name_override="calculator")
    def calculator_tool(expression: str) -> str:
        """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
        return json.dumps(calculator(expression))

    @function_tool
    def write_note(ctx: RunContextWrapper[Research], title: str, body: str) -> str:
        """Save a note for the user; returns its id."""
        return json.dumps(ctx.context.write_note(title, body))

    researcher = Agent(name="researcher", instructions=INSTRUCTIONS, model=model,
                       tools=[search_pages, calculator_tool, write_note])
    return Agent(name="triage", model=model, handoffs=[researcher],
                 instructions="Hand every research question to the researcher.")


def _register() -> None:
    # Each SDK agent is built on its first step (a factory, not an agent): importing an SDK
    # takes seconds, and a web process or a worker that never runs one needs none.
    from runs.adapters import openai_agents, pydantic_ai

    base_url, model_name = default_base_url(), default_model()
    if importlib.util.find_spec("pydantic_ai") is not None:
        pydantic_ai.durable(lambda: pydantic_agent(base_url, model_name),
                            name="pydantic_assistant", version="1",
                            description="A Pydantic AI agent with search, calculator and note "
                                        "tools, made durable by runs.adapters",
                            input_schema=input_schema(), deps=Research.from_inputs)
    if importlib.util.find_spec("agents") is not None:
        openai_agents.durable(lambda: openai_agent(base_url, model_name),
                              name="openai_assistant", version="1",
                              description="An OpenAI Agents SDK triage agent handing off to a "
                                          "researcher with search, calculator and note tools, "
                                          "made durable", input_schema=input_schema(),
                              context=Research.from_inputs)


_register()
