"""Agents and tools of the parallel and streaming contract tests (registered into REG)."""

from __future__ import annotations

import threading
import time

from runs.durable import Call, Retry, TransientToolError, agent, tool

from .agents_for_tests import REG, WORLD, SimulatedCrash

_running = {"now": 0, "most": 0}
_running_lock = threading.Lock()
_finished: dict[str, threading.Event] = {}  # item -> done, for `after`
_started: dict[str, threading.Event] = {}   # item -> its call began
_calling = threading.local()  # the item this thread's last call of slow_item was for


def item_of_this_thread() -> str | None:
    """The item of the slow_item call this thread made last (a fault point reached
    after the tool returned, in the same thread, is that call's)."""
    return getattr(_calling, "item", None)


def running_most() -> int:
    return _running["most"]


def reset_running() -> None:
    _running.update(now=0, most=0)
    _finished.clear()
    _started.clear()


def _finished_event(item: str) -> threading.Event:
    with _running_lock:
        return _finished.setdefault(item, threading.Event())


def started_event(item: str) -> threading.Event:
    with _running_lock:
        return _started.setdefault(item, threading.Event())


@tool(idempotent=True, name="tests.slow_item")
def slow_item(item: str, delay: float, after: str | None = None, *,
              idempotency_key: str) -> dict:
    """Idempotent; sleeps `delay`, and first waits for item `after` to finish, so that
    calls asked later finish first (an order no load on the machine changes)."""
    with _running_lock:
        _running["now"] += 1
        _running["most"] = max(_running["most"], _running["now"])
    _calling.item = item
    started_event(item).set()
    try:
        if after is not None:
            assert _finished_event(after).wait(30), f"{after} never finished"
        time.sleep(delay)
        WORLD.record("slow_item", item)
        return WORLD.target.post({"item": item}, idempotency_key)
    finally:
        _finished_event(item).set()
        with _running_lock:
            _running["now"] -= 1


@tool(name="tests.note")
def note(item: str) -> str:
    """Not idempotent: every call is counted."""
    WORLD.record("note", item)
    return f"noted {item}"


@tool(idempotent=True, name="tests.words", stream=True,
      retry=Retry(initial_interval=0.01, maximum_attempts=3))
def words(text: str, pause: float, *, idempotency_key: str):
    """Streams `text` a word at a time. WORLD.flags["die_after"]: the worker dies after
    that many words (once)."""
    WORLD.record("words", idempotency_key)
    for n, word in enumerate(text.split(" ")):
        if WORLD.flags.get("die_after") == n:
            WORLD.flags.pop("die_after")
            raise SimulatedCrash("mid-stream")
        if WORLD.flags.get("fail_after") == n:
            WORLD.flags.pop("fail_after")
            raise TransientToolError("the stream broke off")
        if pause:
            time.sleep(pause)
        yield word if n == 0 else " " + word
    return {"text": text, "words": len(text.split(" "))}


@agent("par_items", registry=REG)
def par_items(ctx, inputs):
    items = WORLD.flags.get("items", inputs["items"])
    delays = [inputs.get("delay", 0.0) * (len(items) - i) for i in range(len(items))]
    # reverse: each call waits for the next one to finish, the last asked finishes first
    # pair: the first waits for the second (so two run at once, whatever the load)
    after = [items[i + 1] if i + 1 < len(items) and (inputs.get("reverse") or
                                                     (inputs.get("pair") and i == 0)) else None
             for i in range(len(items))]
    results = ctx.parallel([Call(slow_item, item, delay, then)
                            for item, delay, then in zip(items, delays, after, strict=True)],
                           max_concurrency=inputs.get("limit", 8))
    after = ctx.call(note, "after")  # an effect after the group: positions go on from it
    return {"items": [r["payload"]["item"] for r in results], "after": after}


@agent("par_mixed", registry=REG)
def par_mixed(ctx, inputs):
    results = ctx.parallel([(slow_item, "a", 0.0), (note, "b"), (slow_item, "c", 0.0)],
                           max_concurrency=3)
    return {"a": results[0]["payload"]["item"], "b": results[1],
            "c": results[2]["payload"]["item"]}


@agent("par_map_errors", registry=REG)
def par_map_errors(ctx, inputs):
    from .agents_for_tests import broken

    results = ctx.map(broken, ["x", "y"], return_exceptions=True)
    return {"errors": [type(r).__name__ for r in results]}


@agent("streamer", registry=REG)
def streamer(ctx, inputs):
    said = ctx.call(words, inputs["text"], inputs.get("pause", 0.0))
    return {"said": said}
