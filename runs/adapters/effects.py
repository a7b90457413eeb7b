"""What both adapters share: an SDK's async calls made into engine effects.

An SDK agent is async; the engine's `ctx.call` is synchronous and must run on the
run's own thread (its store writes use that thread's connection). So a step runs
the SDK's agent on an event loop of the run's thread (`run_step`), the adapter's
model and tool wrappers call `ctx.call` synchronously from inside it (the loop is
the run's alone, so blocking it blocks no other run), and the real request or tool
coroutine runs on one event loop per process (`Bridge`), where the SDK's HTTP
clients live. Many runs' requests share that loop without waiting on each other.

A model request is a streaming effect (`Turn.effect(..., stream=True)`): the engine's
streaming tools' path (runs/durable/streaming.py, docs/streaming.md), with the
request's coroutine on the SDK loop pushing the answer's text into a thread-safe
queue that the engine's stream reader pulls from (`Bridge.stream`).

The engine's own exceptions (a suspension, a stop, a fenced session, a halt) must
leave the SDK untouched by its error handling: `Turn` keeps the first one and
`run_step` raises it once the SDK's call has unwound, whatever the SDK made of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import queue
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from runs.durable.errors import ToolFailedError
from runs.durable.registry import Retry, Tool
from runs.durable.retry import NO_RETRY

from .errors import NoIdempotencyKeyError


def made_by(obj, module: str, cls: str) -> bool:
    """isinstance(obj, module.cls) without importing `module`: if it is not imported,
    nothing can have made `obj` with it."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(obj, getattr(loaded, cls, ()))


def defining_module() -> str:
    """The module that called durable(): where the SDK agent and its tools are written,
    so that the registered agent's code fingerprint (runs/durable/versions.py) covers
    them, not the adapter's own code alone."""
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(__package__ or "runs.adapters"):
            return name
        frame = frame.f_back
    return __name__


def register_sdk_agent(base: type, registry, *, name: str, version: str, **attrs) -> type:
    """The agentops agent class of a wrapped SDK agent (a subclass of `base` with
    `attrs`), registered as `name`. It belongs to the module that called durable(), so
    its code fingerprint covers the caller's code."""
    attrs.update(name=name, version=str(version), __module__=defining_module())
    cls = type(f"Durable_{name}", (base,), attrs)
    cls.__qualname__ = cls.__name__
    registry.register(cls)
    return cls


@dataclass(frozen=True)
class EffectScope:
    """What a tool running as an effect may ask about its call."""

    run_id: str
    key: str | None  # the idempotency key (idempotent tools only)
    tool: str        # the effect's name: "tool.<name>" for a tool of the agent


_scope: contextvars.ContextVar[EffectScope | None] = contextvars.ContextVar(
    "agentops_effect_scope", default=None)
# the NoIdempotencyKeyErrors raised in the call in progress (see _in_scope)
_misuses: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "agentops_key_misuses", default=None)


def current_effect() -> EffectScope | None:
    """Inside a tool of a durable SDK agent: the run, the tool and its idempotency key."""
    return _scope.get()


def idempotency_key() -> str:
    """The idempotency key of the tool call in progress. Only an idempotent tool's call
    has one: in a `non_idempotent` tool (or outside a tool call) it raises
    NoIdempotencyKeyError, which names the tool."""
    scope = _scope.get()
    if scope is None:
        raise NoIdempotencyKeyError(None)
    if scope.key is None:
        error = NoIdempotencyKeyError(scope.tool.removeprefix("tool."))
        noted = _misuses.get()
        if noted is not None:
            noted.append(error)
        raise error
    return scope.key


async def _in_scope(scope: EffectScope | None, make: Callable[..., Awaitable[Any]], *args):
    """`await make(*args)` as the call `scope`. A NoIdempotencyKeyError raised in it fails
    the call even if the SDK made it a message for the model (the Agents SDK's function
    tools do so with any error): it is a bug of the agent's code, which a model cannot
    retry away, and the call it breaks is a non-idempotent one."""
    noted: list = []
    token, misuses = _scope.set(scope), _misuses.set(noted)
    try:
        result = await make(*args)
    finally:
        _scope.reset(token)
        _misuses.reset(misuses)
    if noted:
        raise noted[0]
    return result


def model_meter(model: str) -> Callable[[Any, dict], dict]:
    """The meter of a model call (`Turn.effect(meter=)`) whose logged result has the SDK's
    usage as `{"usage": {"input_tokens", "output_tokens", ...}}`, as both SDKs' have:
    priced as `model`, the model asked for (the price table's key; a provider may answer
    with a dated variant of it), as the built-in chat completion is."""

    def meter(result, _arguments: dict) -> dict:
        usage = (result or {}).get("usage") or {}
        return {"model": model, "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens": usage.get("output_tokens")}

    return meter


class Bridge:
    """One event loop per process for the SDKs' real I/O. Started on first use, and
    again after a fork (a worker process forked from its parent has no loop thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="agentops-sdk-loop",
                                 daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def run(self, make: Callable[[], Awaitable[Any]], scope: EffectScope | None = None):
        """Run `make()` on the loop and wait for its result in this thread."""
        return asyncio.run_coroutine_threadsafe(_in_scope(scope, make), self.loop()).result()

    def stream(self, make: Callable[[Callable[[str], None]], Awaitable[Any]],
               scope: EffectScope | None = None) -> Iterator[str]:
        """Run `make(push)` on the loop; a generator, in the calling thread, of the text
        it pushes as it comes, returning its result (a streaming tool's shape, for
        `streaming.drain`, whose reader thread calls it). The coroutine runs whole in one
        task of the loop (the SDKs' streams are entered and left in one task); `push`
        only puts into a thread-safe queue, so it never waits on the engine."""
        chunks: queue.SimpleQueue = queue.SimpleQueue()
        done = object()
        future = asyncio.run_coroutine_threadsafe(_in_scope(scope, make, chunks.put),
                                                  self.loop())
        future.add_done_callback(lambda _: chunks.put(done))
        try:
            while (chunk := chunks.get()) is not done:
                yield chunk
            return future.result()
        finally:
            future.cancel()  # left unread (fenced, a store failure): the request is ended


bridge = Bridge()


class Turn:
    """One step's calls into the engine, on the run's thread."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.interrupted: BaseException | None = None

    def effect(self, name: str, make: Callable[..., Awaitable[Any]], args: tuple, *,
               idempotent: bool, retry: Retry | None = None, stream: bool = False,
               meter: Callable[[Any, dict], dict] | None = None):
        """`make()`'s result as a logged effect: replayed if this position is logged.

        `stream=True`: `make(push)`, a streaming effect. `push(text)` (called on the SDK
        loop) sends text to the run's viewers as it comes: the call is a streaming tool
        of the engine (`Tool(stream=True)`, drained by runs/durable/streaming.py), its
        text batched into `stream` events of the attempt; what `make` returns is the
        logged result. A replay returns the logged result and streams nothing.

        `meter(result, arguments)`: a model call, metered as the engine's metered tools
        are (docs/budgets.md): the budget gates are asked before it is made, its usage is
        written on its effect and added to the run's in the commit of its result (so a
        replay never counts it again)."""
        if self.interrupted is not None:
            raise self.interrupted
        run_id = self.ctx.run_id

        def call(*_args, idempotency_key=None):
            scope = EffectScope(run_id, idempotency_key, name)
            if stream:
                return bridge.stream(make, scope)
            return bridge.run(make, scope)

        tool = Tool(call, idempotent=idempotent,
                    retry=retry if retry is not None else (Retry() if idempotent else NO_RETRY),
                    name=name, stream=stream, meter=meter)
        return self.engine(self.ctx.call, tool, *args)

    def engine(self, fn, *args, **kwargs):
        """Call into the engine; keep what must end the step (anything but a tool's own
        failure), so that the SDK cannot swallow it."""
        if self.interrupted is not None:
            raise self.interrupted
        try:
            with outside_the_loop():
                return fn(*args, **kwargs)
        except ToolFailedError:
            raise
        except BaseException as exc:
            self.interrupted = exc
            raise


@contextlib.contextmanager
def outside_the_loop():
    """The engine's call, made synchronously from a coroutine on the step's loop, is a
    plain blocking call of this thread: the loop waits for it and nothing else runs on
    it. Django refuses database access from a thread whose loop is running (it cannot
    know that), so the loop is set aside for the duration."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


_turn: contextvars.ContextVar[Turn | None] = contextvars.ContextVar("agentops_turn", default=None)


@contextlib.contextmanager
def turn_in_context(turn: Turn):
    """`turn` is the step's, for whatever runs in this context (the Agents SDK adapter's
    clones of an agent graph, which the SDK calls without a way to pass it)."""
    token = _turn.set(turn)
    try:
        yield turn
    finally:
        _turn.reset(token)


def current_turn() -> Turn:
    turn = _turn.get()
    if turn is None:
        raise RuntimeError("a durable agent's clone runs only inside its run's step")
    return turn


def run_step(turn: Turn, coro):
    """Run one step's SDK coroutine on an event loop of this thread."""
    try:
        result = asyncio.run(coro)
    except BaseException:
        if turn.interrupted is not None:
            # its own cause kept: a StoreFailure's says why the store failed
            raise turn.interrupted from turn.interrupted.__cause__
        raise
    if turn.interrupted is not None:
        raise turn.interrupted
    return result
