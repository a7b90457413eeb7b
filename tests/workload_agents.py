"""Agents the process-level tests launch (loaded with AGENTOPS_AGENT_MODULES).

They use only the public API, and they reach "the outside world" through the
sandbox over real HTTP, so tests can count what arrived downstream.
"""

import os
import time

import httpx

from builtin_agents.tools import http
from runs.durable import Agent, Done, Retry, agent, tool

# As a real agent would: the outside world may be away for minutes (a deploy of the
# target, tests/chaos's sandbox_outage); waits past a second are durable timers.
OUTLAST_OUTAGES = Retry(initial_interval=0.2, maximum_interval=2.0, maximum_attempts=None,
                        maximum_elapsed=600.0)


def sandbox_url() -> str:
    return os.environ.get("AGENTOPS_SANDBOX_URL", "http://127.0.0.1:8000/sandbox")


_clients: dict[int, httpx.Client] = {}


def _client() -> httpx.Client:
    """The process's client (a forked worker makes its own). `httpx.post` would make a
    client a call, and a client's making costs ~50 ms of CPU (its TLS context): 3 cores'
    worth at bench/deploy.py's 65 calls a second, which then measured a saturated machine.
    No connection is kept between calls, so each call connects as before: a target
    restarted meanwhile (tests/chaos) never meets a stale one."""
    pid = os.getpid()
    if pid not in _clients:  # two threads making one each at once: one is kept, both work
        _clients[pid] = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
    return _clients[pid]


def _post(path: str, payload: dict, headers: dict | None = None) -> dict:
    # The built-in tools' rule for what reached the target: a notification the sandbox
    # took before it stopped (tests/chaos's sandbox_outage) is in doubt, not failed.
    url = f"{sandbox_url()}{path}"
    with http.transport_errors(url):
        response = _client().post(url, json=payload, headers=headers or {})
    response.raise_for_status()
    return response.json()


@tool(idempotent=True, retry=OUTLAST_OUTAGES)
def post_record(unit: str, value: int, *, idempotency_key: str) -> dict:
    body = _post("/api/records", {"unit": unit, "value": value},
                 {"Idempotency-Key": idempotency_key})
    return {"id": body["id"]}


@tool(retry=OUTLAST_OUTAGES)
def send_notification(unit: str) -> dict:
    return {"count": _post("/api/notifications", {"unit": unit})["count"]}


@tool(idempotent=True)
def pause_for(seconds: float, *, idempotency_key: str) -> float:
    time.sleep(seconds)
    return seconds


@agent("steps", version="1", input_schema={
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 20},
        "delay": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.05},
        "notify": {"type": "boolean", "default": False},
    },
})
class Steps(Agent):
    """Writes one record per step to the sandbox; optionally notifies at the end."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"],
                "notify": inputs["notify"], "total": 0}

    def step(self, ctx, state):
        i = state["i"]
        if state["delay"]:
            ctx.call(pause_for, state["delay"])
        ctx.call(post_record, f"{ctx.run_id}-{i}", i)
        state["total"] += i
        state["i"] = i + 1
        ctx.log(f"wrote unit {i}")
        ctx.progress(state["i"], state["n"], f"unit {i}")
        if state["i"] < state["n"]:
            return state
        if state["notify"]:
            ctx.call(send_notification, f"{ctx.run_id}-done")
        return Done({"units": state["n"], "total": state["total"]})


@agent("fan_out", version="1", input_schema={
    "type": "object",
    "properties": {
        "children": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 20},
        "cap": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
        "steps": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 4},
        "delay": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.1},
        "child": {"type": "string", "enum": ["steps", "ticker"], "default": "steps"},
    },
})
class FanOut(Agent):
    """Spawns `children` runs of `child` (at most `cap` at once; `steps` children notify
    when done), then waits for them all: its output is their outputs, in spawn order."""

    def start(self, inputs):
        return {**inputs, "spawned": []}

    def step(self, ctx, state):
        if not state["spawned"]:
            child_inputs = {"steps": state["steps"], "delay": state["delay"]}
            if state["child"] == "steps":
                child_inputs["notify"] = True
            state["spawned"] = [ctx.spawn(state["child"], child_inputs, max_children=state["cap"])
                                .as_state() for _ in range(state["children"])]
            return state
        return Done({"results": ctx.wait_all(state["spawned"])})


@agent("ticker", version="1", input_schema={
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 30,
                  "description": "how many steps"},
        "delay": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.2,
                  "description": "seconds per step"},
    },
})
class Ticker(Agent):
    """Counts slowly, with logs and progress: no outside world needed."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"]}

    def step(self, ctx, state):
        ctx.call(pause_for, state["delay"])
        state["i"] += 1
        ctx.log(f"tick {state['i']}")
        ctx.progress(state["i"], state["n"])
        return Done({"ticks": state["i"]}) if state["i"] >= state["n"] else state


@tool
def slow_call(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@agent("one_long_call", version="1", input_schema={
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0, "maximum": 3600, "default": 600,
                    "description": "how long the call takes"},
    },
})
class OneLongCall(Agent):
    """Makes one tool call that takes `seconds` (a slow model call), then ends: a run
    that waits in its tool for as long as a test looks at it, without steps between.
    The tool is not idempotent, so its intent is logged first: a test sees in the
    database (an Effect in status intent) that the run has reached its call."""

    def start(self, inputs):
        return {"seconds": inputs["seconds"]}

    def step(self, ctx, state):
        return Done({"waited": ctx.call(slow_call, state["seconds"])})


@agent("ask", version="1", input_schema={
    "type": "object",
    "properties": {"question": {"type": "string", "default": "What is your name?"}},
})
class Ask(Agent):
    """Asks the user a question and greets them."""

    def start(self, inputs):
        return {"question": inputs["question"]}

    def step(self, ctx, state):
        ctx.log("asking")
        answer = ctx.wait_for_input(state["question"], schema={
            "type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
            "required": ["name"]})
        return Done({"greeting": f"Hello, {answer['name']}!"})


@agent("shout", version="1")
def shout(ctx, inputs):
    """Writes markup into its log and output (escaping must hold)."""
    ctx.log("<script>window.__pwned = 1</script><b>bold</b>")
    return {"html": "<script>window.__pwned = 2</script>", "text": inputs.get("text", "")}


@tool(idempotent=True)
def kill_my_worker(*, idempotency_key: str) -> None:
    os.kill(os.getpid(), 9)


@agent("crasher", version="1")
class Crasher(Agent):
    """Kills its worker in step 2, every time: the crash-loop guard must stop it."""

    def step(self, ctx, state):
        if ctx.step_no == 2:
            ctx.call(kill_my_worker)
        return state if ctx.step_no < 3 else Done("unreachable")
