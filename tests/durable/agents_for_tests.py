"""Agents and tools for the contract suite, registered into their own registries.

Everything is module-level and importable, so any store's subclass of the
contract (and any worker thread) runs the same code. The tools act on `WORLD`,
a tiny in-process outside world that each test resets:

  * `WORLD.target` is an idempotent API: it records every request and does the
    work once per idempotency key, as a real idempotent endpoint would;
  * `WORLD.calls` counts calls of the non-idempotent tools, by tool name.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from typing import ClassVar

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    Retry,
    ToolFailedError,
    TransientToolError,
    agent,
    control,
    tool,
)

REG = AgentRegistry()
REG_V2 = AgentRegistry()  # the same agent names after a deploy that changed the code


class SimulatedCrash(BaseException):
    """The worker dies here: nothing below it runs, nothing is released.

    A BaseException so that neither the engine nor an agent can catch it.
    """


class Target:
    """An idempotent API: every request is recorded, the work is done once per key."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: list[tuple[str, object]] = []
        self.work: dict[str, dict] = {}

    def post(self, payload, key: str) -> dict:
        with self._lock:
            self.requests.append((key, payload))
            if key not in self.work:
                self.work[key] = {"id": len(self.work) + 1, "payload": payload}
            return dict(self.work[key])

    def keys(self) -> list[str]:
        return [key for key, _ in self.requests]


class World:
    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.target = Target()
        self.calls: Counter = Counter()
        self.args: list[tuple[str, object]] = []
        self.flags: dict = {}
        self.crash_plan: dict[str, int] = {}
        self.seen: list = []
        self.resumes: list[dict] = []
        self.store = None
        self.stop_event = threading.Event()
        self.started = threading.Event()
        self.release = threading.Event()

    def record(self, name: str, arg=None) -> None:
        self.calls[name] += 1
        self.args.append((name, arg))

    def crash_here(self, where: str, step_no: int) -> None:
        """Crash once at `where` in step `step_no`, if the test planned it."""
        if self.crash_plan.get(where) == step_no:
            del self.crash_plan[where]
            raise SimulatedCrash(f"{where} in step {step_no}")


WORLD = World()


# --- tools -------------------------------------------------------------------------------
@tool(name="tests.echo")
def echo(value):
    """Not idempotent: every call is counted."""
    WORLD.record("echo", value)
    return value


@tool(name="tests.bump")
def bump(i: int) -> int:
    WORLD.record("bump", i)
    return i * 10


@tool(idempotent=True, name="tests.post_record")
def post_record(record, *, idempotency_key: str) -> dict:
    WORLD.record("post_record", record)
    return WORLD.target.post(record, idempotency_key)


@tool(name="tests.send_email")
def send_email(to: str) -> dict:
    WORLD.record("send_email", to)
    return {"sent_to": to, "n": WORLD.calls["send_email"]}


@tool(name="tests.flaky", retry=Retry(maximum_attempts=3, initial_interval=0))
def flaky(value):
    WORLD.record("flaky", value)
    if WORLD.calls["flaky"] <= WORLD.flags.get("flaky_failures", 0):
        # not idempotent: retried only because the failure says nothing was sent
        raise TransientToolError(f"flaky failure {WORLD.calls['flaky']}", reached_target=False)
    return value


@tool(name="tests.broken")
def broken(value):
    WORLD.record("broken", value)
    if WORLD.flags.get("broken", True):
        raise ValueError(f"broken tool cannot handle {value!r}")
    return value


@tool(idempotent=True, name="tests.slow_post")
def slow_post(record, *, idempotency_key: str) -> dict:
    """Blocks the first call until the test releases it."""
    WORLD.record("slow_post", record)
    if WORLD.calls["slow_post"] == 1:
        WORLD.started.set()
        if not WORLD.release.wait(10):
            raise TimeoutError("the test never released slow_post")
    return WORLD.target.post(record, idempotency_key)


@tool(name="tests.slow_echo")
def slow_echo(value):
    """Not idempotent; blocks the first call until the test releases it."""
    WORLD.record("slow_echo", value)
    if WORLD.calls["slow_echo"] == 1:
        WORLD.started.set()
        if not WORLD.release.wait(10):
            raise TimeoutError("the test never released slow_echo")
    return value


@tool(name="tests.pause_me")
def pause_me(run_id: str) -> str:
    """A tool that asks for its own run to be paused, as an operator would."""
    WORLD.record("pause_me", run_id)
    control.pause(WORLD.store, run_id, actor="tool", reason="asked by a tool")
    return "pause requested"


@tool(name="tests.request_shutdown")
def request_shutdown() -> str:
    """A tool during which the worker is told to shut down (SIGTERM)."""
    WORLD.record("request_shutdown")
    WORLD.stop_event.set()
    return "shutdown requested"


@tool(idempotent=True, name="tests.crash_tool")
def crash_tool(*, idempotency_key: str):
    """Kills its worker every time."""
    WORLD.record("crash_tool", idempotency_key)
    raise SimulatedCrash("crash_tool")


@tool(name="tests.greet")
def greet(name: str) -> str:
    WORLD.record("greet", name)
    return f"hello, {name}"


# --- agents ------------------------------------------------------------------------------
class Steps(Agent):
    """n steps, each calls bump(i) once; logs and reports progress."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}

    def start(self, inputs):
        return {"n": inputs["n"], "i": 0, "values": []}

    def step(self, ctx, state):
        WORLD.seen.append(("step", ctx.step_no, ctx.is_replaying))
        i = state["i"] + 1
        ctx.log(f"step {i} begins")
        state["values"].append(ctx.call(bump, i))
        WORLD.crash_here("after_call", ctx.step_no)
        state["i"] = i
        ctx.progress(i, state["n"], f"{i} of {state['n']}")
        ctx.log(f"step {i} ends")
        if i == state["n"]:
            return Done({"values": state["values"]})
        return state


agent("steps", registry=REG)(Steps)


@agent("steps_every2", registry=REG)
class StepsEvery2(Steps):
    checkpoint_every = 2


@agent("steps_every10", registry=REG)
class StepsEvery10(Steps):
    checkpoint_every = 10


@agent("steps_timed", registry=REG)
class StepsTimed(Steps):
    """Checkpoints only by time: step 3 is slow, the others are fast."""

    checkpoint_every = 1000
    checkpoint_seconds = 0.25

    def step(self, ctx, state):
        if ctx.step_no == 3:
            import time
            time.sleep(0.3)
        return super().step(ctx, state)


@tool(name="tests.unordered")
def unordered() -> dict:
    """A result whose key order a store may not keep, and a tuple JSON has no word for."""
    return {"count": 2, "hits": ("b", "a"), "nested": {"z": 1, "a": [{"y": 0, "b": 1}]}}


@agent("ordered", registry=REG)
class Ordered(Agent):
    """Notes the result of its first call as the step sees it, byte for byte, then
    makes a second call (where a test crashes it)."""

    def start(self, inputs):
        return {}

    def step(self, ctx, state):
        WORLD.seen.append(json.dumps(ctx.call(unordered)))
        ctx.call(post_record, {"n": 1})
        return Done(state)


@agent("keys", registry=REG)
class Keys(Agent):
    """Each step posts one record to the idempotent target, two calls in step 2."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}

    def start(self, inputs):
        return {"n": inputs["n"], "i": 0, "ids": []}

    def step(self, ctx, state):
        i = state["i"] + 1
        state["ids"].append(ctx.call(post_record, {"i": i})["id"])
        if i == 2:
            state["ids"].append(ctx.call(post_record, {"i": i, "extra": True})["id"])
        WORLD.crash_here("after_post", ctx.step_no)
        state["i"] = i
        return Done({"ids": state["ids"]}) if i == state["n"] else state


@agent("replay_values", registry=REG)
def replay_values(ctx, inputs):
    """now() and random() are recorded with the next logged effect."""
    t, x = ctx.now(), ctx.random()
    WORLD.seen.append((t, x))
    ctx.call(echo, "first")
    WORLD.crash_here("after_first", ctx.step_no)
    ctx.call(echo, "second")
    return {"t": t, "x": x}


@agent("nondet", registry=REG)
def nondet(ctx, inputs):
    """Its argument comes from a flag the test flips between crash and resume."""
    a = ctx.call(echo, WORLD.flags.get("arg", "a"))
    WORLD.crash_here("after_first", ctx.step_no)
    b = ctx.call(echo, "b")
    return {"a": a, "b": b}


@agent("in_doubt", registry=REG)
class InDoubt(Agent):
    """Step 1 sends an email (not idempotent) and posts a record (idempotent)."""

    def step(self, ctx, state):
        sent = ctx.call(send_email, "ada@example.com")
        posted = ctx.call(post_record, {"after": "email"})
        return Done({"sent": sent, "posted": posted["id"]})


@agent("idem_first", registry=REG)
def idem_first(ctx, inputs):
    """An idempotent call, then a non-idempotent one."""
    posted = ctx.call(post_record, {"order": 1})
    return {"posted": posted, "echo": ctx.call(echo, "after")}


@agent("flaky", registry=REG)
def flaky_agent(ctx, inputs):
    return {"value": ctx.call(flaky, "v")}


@agent("broken", registry=REG)
class Broken(Agent):
    """Step 1 is fine; step 2 calls a broken tool, catching its error if asked to."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {"catch": {"type": "boolean",
                                                               "default": False}}}

    def start(self, inputs):
        return {"catch": inputs["catch"], "i": 0}

    def step(self, ctx, state):
        state["i"] += 1
        if state["i"] == 1:
            ctx.call(echo, "fine")
            return state
        ctx.call(echo, "before broken")
        try:
            value = ctx.call(broken, "x")
        except ToolFailedError as exc:
            if not state["catch"]:
                raise
            WORLD.seen.append(exc)
            WORLD.crash_here("after_caught", ctx.step_no)
            return Done({"caught": exc.error_type, "attempts": exc.attempts,
                         "tool": exc.tool})
        return Done({"value": value})


@agent("bad_state", registry=REG)
class BadState(Agent):
    """Step 2 puts a value JSON cannot store into the state."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {"kind": {"type": "string",
                                                              "default": "set"}}}

    def start(self, inputs):
        return {"kind": inputs["kind"], "i": 0, "data": {"items": []}}

    def step(self, ctx, state):
        state["i"] += 1
        ctx.call(echo, state["i"])
        if state["i"] == 2:
            import datetime
            bad = {"set": {"a", "b"}, "datetime": datetime.datetime(2024, 1, 1)}[state["kind"]]
            state["data"]["items"].append({"tags": bad})
        if state["i"] == 3:
            return Done("unreachable")
        return state


@agent("slow", registry=REG)
def slow(ctx, inputs):
    """A slow idempotent call, then a fast non-idempotent one."""
    posted = ctx.call(slow_post, {"slow": True})
    return {"posted": posted["id"], "after": ctx.call(echo, "after slow")}


@agent("slow_steps", registry=REG)
class SlowSteps(Agent):
    """Step 1 makes a slow call; every step echoes its number."""

    def start(self, inputs):
        return {"i": 0, "out": []}

    def step(self, ctx, state):
        state["i"] += 1
        if state["i"] == 1:
            ctx.call(slow_echo, "slow")
        state["out"].append(ctx.call(echo, state["i"]))
        return Done(state["out"]) if state["i"] == 3 else state


@agent("self_pauser", registry=REG)
def self_pauser(ctx, inputs):
    """A tool pauses the run mid-step; the next call is the boundary."""
    ctx.call(pause_me, ctx.run_id)
    ctx.log("between the calls")
    ctx.progress(1, 2, "half way")
    return {"second": ctx.call(echo, "second")}


@agent("stopper", registry=REG)
def stopper(ctx, inputs):
    """The worker is told to shut down during the first call."""
    first = ctx.call(request_shutdown)
    return {"first": first, "second": ctx.call(echo, "second")}


@agent("sleeper", registry=REG)
def sleeper(ctx, inputs):
    before = ctx.call(echo, "before sleep")
    ctx.sleep(inputs["seconds"])
    return {"before": before, "after": ctx.call(echo, "after sleep")}


ANSWER_SCHEMA = {"type": "object", "properties": {"colour": {"type": "string",
                                                             "enum": ["red", "blue"]}},
                 "required": ["colour"]}


@agent("asker", registry=REG)
def asker(ctx, inputs):
    ctx.call(echo, "before asking")
    answer = ctx.wait_for_input("Which colour?", schema=ANSWER_SCHEMA)
    return {"answer": answer, "after": ctx.call(echo, "after answer")}


@agent("crasher", registry=REG)
def crasher(ctx, inputs):
    """Kills its worker in step 1, every time."""
    ctx.call(crash_tool)
    return "never"


class Resumable(Agent):
    """Four steps; on_resume records how long the run was away and marks the state."""

    version = "1"
    checkpoint_every = 10

    def start(self, inputs):
        return {"i": 0, "resumed": 0, "out": []}

    def step(self, ctx, state):
        state["i"] += 1
        state["out"].append(ctx.call(echo, f"v{self.version}:{state['i']}"))
        WORLD.crash_here("after_echo", ctx.step_no)
        if state["i"] == 2 and WORLD.flags.pop("pause_in_step_2", False):
            ctx.call(pause_me, ctx.run_id)
        if state["i"] == 4:
            return Done({"out": state["out"], "resumed": state["resumed"]})
        return state

    def on_resume(self, ctx, state):
        WORLD.resumes.append({"suspended_for": ctx.suspended_for, "step_no": ctx.step_no,
                              "i": state["i"], "version": self.version})
        if WORLD.flags.get("on_resume_fails"):
            raise RuntimeError("the outside world moved on")
        ctx.log(f"back after {ctx.suspended_for:.0f} s")
        state["resumed"] += 1
        return state


agent("resumable", registry=REG)(Resumable)


@agent("resumable", version="2", registry=REG_V2)
class ResumableV2(Resumable):
    pass


@agent("hello", registry=REG)
def hello(ctx, inputs):
    return {"greeting": ctx.call(greet, inputs["name"])}


@agent("nul_talk", registry=REG)
def nul_talk(ctx, inputs):
    ctx.log("before\x00after")
    ctx.progress(1, 1, "half\x00way")
    return {"ok": True}


@agent("schema", registry=REG, input_schema={
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1},
                   "times": {"type": "integer", "default": 2}}})
def schema_agent(ctx, inputs):
    return {"names": [inputs["name"]] * inputs["times"]}


@agent("bad_start", registry=REG)
class BadStart(Agent):
    """start() fails, or makes a state JSON cannot hold."""

    def start(self, inputs):
        if inputs.get("mode") == "unserialisable":
            return {"seen": {"a"}}
        return {"url": inputs["url"]}  # KeyError: no url given

    def step(self, ctx, state):
        return Done(state)


@agent("careless", registry=REG)
def careless(ctx, inputs):
    """Turns every exception of a call into data, as many LLM agents do."""
    results = []
    for value in ("a", WORLD.flags.get("arg", "b"), "c"):
        try:
            results.append(ctx.call(echo, value))
        except Exception as exc:  # noqa: BLE001 - the carelessness under test
            results.append(type(exc).__name__)
        WORLD.crash_here("after_call", len(results))
    return results


@agent("careless_mail", registry=REG)
def careless_mail(ctx, inputs):
    try:
        sent = ctx.call(send_email, "ada@example.com")
    except Exception as exc:  # noqa: BLE001 - the carelessness under test
        sent = type(exc).__name__
    return {"sent": sent, "after": ctx.call(echo, "after mail")}


@agent("careless_slow", registry=REG)
def careless_slow(ctx, inputs):
    try:
        first = ctx.call(slow_post, {"slow": True})["id"]
    except Exception as exc:  # noqa: BLE001 - the carelessness under test
        first = type(exc).__name__
    return {"first": first, "second": ctx.call(post_record, {"second": True})["id"]}


@agent("bad_output", registry=REG)
def bad_output(ctx, inputs):
    return {"tags": {"a", "b"}}


@agent("bad_return", registry=REG)
class BadReturn(Agent):
    def step(self, ctx, state):
        return ["neither", "a", "state", "nor", "Done"]


@agent("poller", registry=REG)
class Poller(Agent):
    """n steps that each call echo and change nothing in the state; the step `sleep_at`
    (if any) waits 30 s after its call."""

    def start(self, inputs):
        return {"n": inputs["n"], "sleep_at": inputs.get("sleep_at")}

    def step(self, ctx, state):
        WORLD.seen.append(("step", ctx.step_no, ctx.is_replaying))
        ctx.call(echo, f"poll {ctx.step_no}")
        WORLD.crash_here("after_call", ctx.step_no)
        if ctx.step_no == state["sleep_at"]:
            ctx.sleep(30)
        if ctx.step_no == state["n"]:
            return Done({"polls": ctx.step_no})
        return state


@agent("big_state", registry=REG)
class BigState(Agent):
    """A ~200 KB state of which one item changes per step: checkpoints become patches."""

    def start(self, inputs):
        return {"i": 0, "n": inputs.get("n", 6),
                "items": [{"id": k, "text": hashlib.sha256(str(k).encode()).hexdigest() * 2}
                          for k in range(1500)]}

    def step(self, ctx, state):
        i = state["i"]
        state["items"][(i * 37) % 1500]["text"] = ctx.call(echo, f"changed at step {i}")
        state["i"] = i + 1
        if state["i"] == state["n"]:
            return Done({"changed": [it["text"] for it in state["items"] if it["text"].startswith("changed")],
                         "size": len(state["items"])})
        return state


class _QueueWalker(Agent):
    """Takes the next item off its queue in place, before the step's calls (as the crawl
    agent takes a batch off its frontier), and echoes it. The first `polls` steps only
    poll (their state is unchanged); the step `shutdown_at` asks for a shutdown after its
    first call, the step `sleep_at` waits 30 s there: the step's next call or its wait
    cuts it short after it changed its state."""

    def start(self, inputs):
        return {"queue": list(inputs["items"]), "done": [], "polls": inputs.get("polls", 0),
                "shutdown_at": inputs.get("shutdown_at"), "sleep_at": inputs.get("sleep_at")}

    def step(self, ctx, state):
        if ctx.step_no <= state["polls"]:
            ctx.call(echo, f"poll {ctx.step_no}")
            return state
        item = state["queue"].pop(0)
        state["done"].append(ctx.call(echo, item))
        if ctx.step_no == state["shutdown_at"]:
            ctx.call(request_shutdown)
        if ctx.step_no == state["sleep_at"]:
            ctx.sleep(30)
        ctx.call(echo, f"{item} taken")
        return state if state["queue"] else Done(state["done"])


@agent("queue_walker", registry=REG)
class QueueWalker(_QueueWalker):
    checkpoint_every = 10


@agent("queue_poller", registry=REG)
class QueuePoller(_QueueWalker):
    checkpoint_every = 1
