"""SDK agents for the adapters' tests: a Pydantic AI agent and an OpenAI Agents SDK agent,
each with three tools and a multi-turn conversation against the sandbox's scripted model.

Loaded by the process-level tests with AGENTOPS_AGENT_MODULES (registered as
``test_pydantic`` and ``test_openai``, and as ``test_pydantic_notes`` and
``test_openai_notes`` with ``write_note`` non-idempotent); the in-process tests build
the same agents with a transport of their own (``build_*``).

Every tool execution and every model response served is written to a journal (a
JSON-lines file named by AGENTOPS_TEST_JOURNAL, or a list in-process) with its time,
so that a test can prove, across SIGKILLs: no tool ran again after its result was
logged, and no logged model response was asked for again.
"""

import hashlib
import json
import os
import threading
import time
import uuid

import httpx

from runs.adapters import current_effect

SCHEMA = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "prompt": {"type": "string", "minLength": 1},
        "follow_ups": {"type": "array", "items": {"type": "string"}, "default": []},
        "delay": {"type": "number", "minimum": 0, "default": 0.0},
    },
}
INSTRUCTIONS = "Use search_pages, calculator and write_note; then answer."


class Journal:
    def __init__(self):
        self.entries: list[dict] = []
        self._lock = threading.Lock()

    def write(self, **entry) -> None:
        entry |= {"at": time.time(), "pid": os.getpid()}
        path = os.environ.get("AGENTOPS_TEST_JOURNAL")
        if path:
            # One write(2) of a line under O_APPEND: lines of processes never interleave.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(entry) + "\n").encode())
            finally:
                os.close(fd)
        with self._lock:
            self.entries.append(entry)


JOURNAL = Journal()


def read_journal(path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


# The records API's client; in-process tests put the records API itself here (no server).
POST = httpx.post


def sandbox_url() -> str:
    return os.environ.get("AGENTOPS_SANDBOX_URL", "http://127.0.0.1:8000/sandbox")


# --- the tools (the same functions behind both SDKs' tools) --------------------------------
def _key() -> str | None:
    """The call's idempotency key; None in a plain run of the SDK (no engine) and for a
    tool marked non-idempotent (which gets none)."""
    scope = current_effect()
    return scope.key if scope is not None else None


def search_pages(query: str, delay: float) -> dict:
    JOURNAL.write(kind="tool", tool="search_pages", key=_key())
    time.sleep(delay)
    words = query.split()
    return {"count": len(words) + 2, "hits": [{"title": f"Page about {w}"} for w in words]}


def calculator(expression: str, delay: float) -> dict:
    JOURNAL.write(kind="tool", tool="calculator", key=_key())
    time.sleep(delay)
    left, _, right = expression.partition("*")
    return {"result": int(left) * int(right or 1)}


def write_note(title: str, body: str, delay: float) -> dict:
    """Stored through the sandbox's idempotent records API (a real side effect)."""
    key = _key() or f"plain-{uuid.uuid4().hex}"
    JOURNAL.write(kind="tool", tool="write_note", key=key)
    time.sleep(delay)
    run_id = current_effect().run_id if current_effect() is not None else "plain"
    unit = f"{run_id}-note-" + key.split(":", 1)[-1].replace(":", "-")
    response = POST(f"{sandbox_url()}/api/records", json={"unit": unit, "kind": "note",
                                                           "title": title, "body": body},
                    headers={"Idempotency-Key": key}, timeout=10)
    response.raise_for_status()
    # The note's id is its content's (the record's own id differs from run to run), so
    # that a run's answer can be compared with another's.
    digest = hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()[:12]
    return {"id": f"note-{digest}", "record": response.json()["id"]}


async def _journal_response(response: httpx.Response) -> None:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        if response.status_code != 200:
            return
        try:
            _journal_events(response.content)  # a body given whole (a mock transport)
        except httpx.ResponseNotRead:
            # Journaled once its last event is read, and left unbuffered: the SDK reads
            # the stream as it comes.
            response.stream = _JournaledStream(response.stream)
        return
    await response.aread()
    if response.status_code == 200:
        body = response.json()
        _journal_message(body["id"], body["choices"][0]["message"])


def _journal_message(completion_id: str, message: dict) -> None:
    names = [completion_id, *(c["id"] for c in message.get("tool_calls") or [])]
    if message.get("content"):
        names.append(message["content"])
    JOURNAL.write(kind="model", names=names)


class _JournaledStream(httpx.AsyncByteStream):
    """A chat completion's server-sent events, passed on as they come; journaled once
    read to `[DONE]`."""

    def __init__(self, stream):
        self.stream = stream
        self.body = b""
        self.journaled = False

    async def __aiter__(self):
        async for chunk in self.stream:
            self.body += chunk
            yield chunk
        self._journal()

    async def aclose(self) -> None:
        self._journal()
        await self.stream.aclose()

    def _journal(self) -> None:
        if not self.journaled:
            self.journaled = _journal_events(self.body)


def _journal_events(body: bytes) -> bool:
    """Journal the message a stream's events add up to (its id, its tool calls' ids, its
    text), if it was read to its end."""
    from builtin_agents.tools.llm import Reply

    events = [line[len(b"data: "):] for line in body.splitlines() if line.startswith(b"data: ")]
    if not events or events[-1] != b"[DONE]":
        return False  # cut short: never served whole
    chunks = [json.loads(event) for event in events[:-1]]
    reply = Reply()
    for chunk in chunks:
        reply.add(chunk)
    completion_id = next((chunk["id"] for chunk in chunks if chunk.get("id")), None)
    _journal_message(completion_id, reply.result()["message"])
    return True


def response_names(result: dict) -> set:
    """What identifies a logged model response (either SDK's): the completion id, the ids
    of the tool calls it asks for, its text: what the journal says of the one served."""
    names = {result.get("provider_response_id"), result.get("response_id")}
    for part in result.get("parts", []) + result.get("output", []):
        names.add(part.get("tool_call_id") or part.get("call_id"))
        if part.get("part_kind") == "text":
            names.add(part.get("content"))
        for content in part.get("content", []) if isinstance(part.get("content"), list) else []:
            names.add(content.get("text"))
    return names - {None, "", "__fake_id__"}


def check_journal(entries: list[dict], effects) -> None:
    """No tool ran, and no model response was asked for, after its effect was logged.

    `effects`: (tool, key, status, finished_at, result) of every call of the runs."""
    logged_at, responses = {}, {}
    for tool, key, status, finished_at, result in effects:
        if status != "done":
            continue
        logged_at[key] = finished_at
        if tool.endswith(("model_request", "model_call")):
            for name in response_names(result):
                responses[name] = finished_at
    for entry in entries:
        if entry["kind"] == "tool":
            assert entry["key"] in logged_at, f"a tool ran under a key never logged: {entry}"
            assert entry["at"] <= logged_at[entry["key"]], f"ran again after its log: {entry}"
        else:
            # the completion's id when the SDK keeps it, else what else names it
            names = entry["names"][:1] if entry["names"][0] in responses else entry["names"]
            logged = [responses[n] for n in names if n in responses]
            assert logged, f"a model response served but never logged: {entry}"
            assert entry["at"] <= min(logged), f"a logged request was sent again: {entry}"


def http_client(transport=None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, timeout=30,
                             event_hooks={"response": [_journal_response]})


# --- Pydantic AI --------------------------------------------------------------------------
def build_pydantic(base_url: str, transport=None):
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="test",
                              http_client=http_client(transport))
    agent = Agent(OpenAIChatModel("scripted", provider=provider), deps_type=dict,
                  instructions=INSTRUCTIONS)

    @agent.tool(name="search_pages")
    def search_pages_tool(ctx: RunContext[dict], query: str) -> dict:
        return search_pages(query, ctx.deps["delay"])

    @agent.tool(name="calculator")
    def calculator_tool(ctx: RunContext[dict], expression: str) -> dict:
        return calculator(expression, ctx.deps["delay"])

    @agent.tool(name="write_note")
    def write_note_tool(ctx: RunContext[dict], title: str, body: str) -> dict:
        return write_note(title, body, ctx.deps["delay"])

    return agent


# --- OpenAI Agents SDK ---------------------------------------------------------------------
def build_openai(base_url: str, transport=None):
    from agents import Agent, OpenAIChatCompletionsModel, RunContextWrapper, function_tool
    from openai import AsyncOpenAI

    model = OpenAIChatCompletionsModel("scripted", AsyncOpenAI(
        base_url=base_url, api_key="test", http_client=http_client(transport)))

    @function_tool(name_override="search_pages")
    def search_pages_tool(ctx: RunContextWrapper[dict], query: str) -> str:
        """Search pages."""
        return json.dumps(search_pages(query, ctx.context["delay"]))

    @function_tool(name_override="calculator")
    def calculator_tool(ctx: RunContextWrapper[dict], expression: str) -> str:
        """Arithmetic."""
        return json.dumps(calculator(expression, ctx.context["delay"]))

    @function_tool(name_override="write_note")
    def write_note_tool(ctx: RunContextWrapper[dict], title: str, body: str) -> str:
        """Save a note."""
        return json.dumps(write_note(title, body, ctx.context["delay"]))

    researcher = Agent(name="researcher", instructions=INSTRUCTIONS, model=model,
                       tools=[search_pages_tool, calculator_tool, write_note_tool])
    return Agent(name="triage", instructions="Hand research to the researcher.", model=model,
                 handoffs=[researcher])


# --- the same agents run plainly by their SDKs (no engine): what a durable run must match ---
async def plain_pydantic(agent, inputs: dict, *, streamed: bool = False):
    """The agent run by its SDK alone. `streamed`: its model requests streamed (as a live
    view of the answer needs, and as the durable adapter makes them)."""
    history = []
    for prompt in [inputs["prompt"], *inputs.get("follow_ups", [])]:
        result = await agent.run(prompt, message_history=history, deps=deps(inputs),
                                 event_stream_handler=_ignore_events if streamed else None)
        history = result.all_messages()
    return result.output


async def _ignore_events(run_context, events) -> int:
    return await drained(events)


async def drained(events) -> int:
    """Read a stream of events to its end, as a live view would; how many there were."""
    return len([event async for event in events])


async def plain_openai(agent, inputs: dict, *, streamed: bool = False):
    """As plain_pydantic, for an OpenAI Agents SDK agent."""
    from agents import RunConfig, Runner

    items, starting = None, agent
    for prompt in [inputs["prompt"], *inputs.get("follow_ups", [])]:
        items = [*items, {"role": "user", "content": prompt}] if items else prompt
        config = RunConfig(tracing_disabled=True)
        if streamed:
            result = Runner.run_streamed(starting, items, context=deps(inputs), run_config=config)
            await drained(result.stream_events())
        else:
            result = await Runner.run(starting, items, context=deps(inputs), run_config=config)
        items, starting = result.to_input_list(), result.last_agent
    return result.final_output


def deps(inputs: dict) -> dict:
    return {"delay": inputs["delay"]}


def sdks_of(agent_name: str) -> str:
    """AGENTOPS_TEST_SDKS for a worker tree that runs only `agent_name` (test_pydantic...)."""
    return agent_name.removeprefix("test_").removesuffix("_notes")


def register(registry=None, transport=None, base_url=None, sdks=None) -> None:
    """Built at import, so that the worker tree's main process imports the SDKs before it forks its
    workers: a worker that replaces a killed one has them already (importing one takes
    seconds, on a loaded machine more than the test leaves between two kills). `sdks`
    (AGENTOPS_TEST_SDKS: "pydantic", "openai" or both, comma-separated): the agents of
    which SDKs; a tree that runs one SDK's agents need not import the other (the OpenAI
    Agents SDK takes 2.1 s of CPU to import here, Pydantic AI 1.1 s, at every fresh tree)."""
    from runs.durable import registry as default

    sdks = (sdks or os.environ.get("AGENTOPS_TEST_SDKS") or "pydantic,openai").split(",")
    base_url = base_url or f"{sandbox_url()}/llm/v1"
    registry = registry or default
    for suffix, options in (("", {}), ("_notes", {"non_idempotent": ["write_note"]})):
        if "pydantic" in sdks:
            from runs.adapters import pydantic_ai
            pydantic_ai.durable(build_pydantic(base_url, transport), name=f"test_pydantic{suffix}",
                                version="1", input_schema=SCHEMA, deps=deps, registry=registry,
                                **options)
        if "openai" in sdks:
            from runs.adapters import openai_agents
            openai_agents.durable(build_openai(base_url, transport), name=f"test_openai{suffix}",
                                  version="1", input_schema=SCHEMA, context=deps,
                                  registry=registry, **options)


register()


def scripted(request: httpx.Request) -> httpx.Response:
    """The sandbox's scripted model (its real code) as an httpx transport's handler:
    a completion, or its chunks as server-sent events when the request streams."""
    from sandbox.openai_wire import parse_request
    from sandbox.scripted_llm import complete, stream_chunks

    chat = parse_request(json.loads(request.content))
    completion = complete(chat, created=0)
    if not chat.stream:
        return httpx.Response(200, json=completion)
    events = [f"data: {json.dumps(chunk)}\n\n"
              for chunk in stream_chunks(completion, include_usage=chat.include_usage)]
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          content="".join([*events, "data: [DONE]\n\n"]).encode())
