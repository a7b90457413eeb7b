"""Shared limits per tool or provider: a pre-call gate (runs/durable/policies/gates.py).

A tool names a limit (`@tool(limit="llm")`); the deployment says what the limit is
(`LimitRule`: requests per window, calls at a time, tokens per window). Every
worker process of every host asks the same state, kept by a `LimitStore` (Redis or
the database on the Django side, runs/limits/stores.py; `MemoryLimitStore` here).

The algorithm is a sliding-window log, written once (`admit`, `finish`, `close`)
over a small JSON-able state that a store reads and writes atomically:

  * every call let through is a grant: `until` is its lease expiry while it is in
    flight and the time it ended once it has. A grant counts in the window while
    `until > now - per`. Counting a call until `per` after it *ended* (not after it
    was let through) is what makes the guarantee hold where it matters, at the
    provider: a request reaches the provider between its grant and its end, so no
    window of `per` seconds there sees more than `requests` of them (whatever the
    network did to them on the way).
  * a grant is an attempt's (its holder: the run's fencing epoch). Every attempt is a
    request: one retried after a short wait asks again, and a takeover making a
    cut-off call again needs a grant of its own (docs/limits.md).
  * a call in flight holds a concurrency slot until it ends or its lease runs out:
    a worker killed mid-call gives the slot back after `lease` seconds, never holds
    it for ever.
  * tokens: a metered call adds its tokens to its grant when it ends. Calls in flight
    count at an estimate, the largest call of the limit seen; a call is let through
    while the window's tokens, those estimates and its own stay within the limit, or
    alone when none is in flight: a limit can be overshot by the one call that crossed
    it, as budgets are (docs/budgets.md), unless a call is larger than any before it.
  * Retry-After: a provider that answered "too many requests, come back in N s" to
    one call closes the limit for every caller until then (`close`).
  * the queue (runs/durable/policies/limit_queue.py): callers that find the limit full wait,
    each as its run's durable timer, in a round robin over users (a user with one run
    goes before the next of another user's 500, two busy users take turns, a user's
    own calls in the order they came). After every change the queue is planned again
    and a waiter whose slot opens earlier than its run was told is woken (`Wake`: the
    gate's `wake` moves the run's timer earlier), at once when a slot is free for it,
    so a free slot does not wait for a run sleeping on an old estimate. A waiter not
    back in time is passed over after `HEAD_GRACE`, and dropped after `WAITER_GRACE`.

A call held by a limit is a gate `Hold` with a timer (`wait=True, wake_at`): the run
gives up its worker and its lease and waits durably, showing why ("waiting for llm:
60 requests a minute"). Calls not let through are never made: nothing counts them.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import clock as engine_clock
from ..retry import RETRY_AFTER_LIMIT, retry_after
from . import limit_queue as queue
from .gates import ALLOW, Decision, GateCall, Hold
from .limit_queue import Wake

log = logging.getLogger(__name__)

STORE_RETRY = 5.0         # the store did not answer: the held run asks again after this
# A held run is woken this long before its slot opens and waits the rest in its worker:
# the round trip through the sweep and a claim would cost more (ctx.sleep under a
# second blocks its worker too, runs/durable/retry.py), and a slot would stay free
# for that long at every turn.
EARLY = 1.0
IN_WORKER_ASKS = 3        # waits in the worker for a slot about to open, then a timer
SERVED_MEMORY = 3600.0    # seconds a user's last slot is remembered for the turns


class LimitConfigError(ValueError):
    """A limit that could never be applied as written."""


class LimitStoreError(Exception):
    """The store of the limits' state did not answer (Redis or the database away)."""


@dataclass(frozen=True)
class LimitRule:
    name: str
    requests: int | None = None     # calls let through per `per` seconds
    per: float = 60.0
    concurrency: int | None = None  # calls in flight at once
    tokens: int | None = None       # tokens (prompt + completion) per `per` seconds
    lease: float = 600.0            # a call in flight longer than this is taken as ended

    def __post_init__(self):
        if not self.name:
            raise LimitConfigError("a limit needs a name")
        for field_name in ("requests", "concurrency", "tokens"):
            value = getattr(self, field_name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise LimitConfigError(f"{self.name}: {field_name} must be a whole number >= 1")
        if self.requests is None and self.concurrency is None and self.tokens is None:
            raise LimitConfigError(f"{self.name}: say requests, concurrency or tokens")
        for field_name in ("per", "lease"):
            value = float(getattr(self, field_name))
            if not (0 < value <= 86400) or math.isnan(value):
                raise LimitConfigError(f"{self.name}: {field_name} must be 0-86400 seconds")

    @classmethod
    def of(cls, name: str, data: dict) -> LimitRule:
        """From settings' JSON: {"requests": 60, "per": 60, "concurrency": 4, ...}."""
        unknown = set(data) - {"requests", "per", "concurrency", "tokens", "lease"}
        if unknown:
            raise LimitConfigError(f"{name}: unknown keys {sorted(unknown)}")
        return cls(name=name, **data)

    def describe(self) -> str:
        """'60 requests a minute', '4 at a time', '100,000 tokens a minute'."""
        parts = []
        if self.requests is not None:
            parts.append(f"{_count(self.requests, 'request')} {_per(self.per)}")
        if self.tokens is not None:
            parts.append(f"{_count(self.tokens, 'token')} {_per(self.per)}")
        if self.concurrency is not None:
            parts.append(f"{self.concurrency:,} at a time")
        return ", ".join(parts)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _per(seconds: float) -> str:
    named = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}
    if seconds in named:
        return named[seconds]
    return f"per {seconds:g} s"


# --- the algorithm, on the state a store keeps ---------------------------------------------
@dataclass(frozen=True)
class Verdict:
    allowed: bool
    wake_at: float | None = None
    why: str = ""         # "requests", "concurrency", "tokens", "closed", "turn"
    waiting: int = 0      # callers queued for the limit, this one included
    wakes: tuple[Wake, ...] = ()  # held runs whose turn came earlier: their timers move


@dataclass(frozen=True)
class Finished:
    counted: bool         # the call was this limit's (a grant of that holder)
    wakes: tuple[Wake, ...] = ()


def empty_state() -> dict:
    return {"closed_until": 0.0, "grants": [], "waiters": {}, "served": {}}


def _prune(rule: LimitRule, state: dict, now: float) -> None:
    state.setdefault("closed_until", 0.0)
    # an ended call matters only to a window (requests, tokens): a concurrency limit
    # alone keeps the calls in flight, however many end a minute
    windowed = rule.requests is not None or rule.tokens is not None
    state["grants"] = [g for g in state.get("grants", []) if g["until"] > now - rule.per
                       and (windowed or not g["done"])]
    state["waiters"] = {k: w for k, w in state.get("waiters", {}).items() if w["expires"] > now}
    # a user not served for this long is as good as never served: forgotten
    horizon = now - max(SERVED_MEMORY, rule.per)
    state["served"] = {u: t for u, t in state.get("served", {}).items() if t > horizon}


def admit(rule: LimitRule, state: dict, key: str, user: str, now: float,
          holder: int | None = None, run: str | None = None) -> Verdict:
    """Let the call `key` of `user` through (a grant) or queue it; changes `state`.
    `holder` is who makes the request (the run's fencing epoch): another holder asking
    about a call in flight is another request to the provider. `run` is the run to
    wake (`Verdict.wakes` of later changes) when its turn comes earlier than it was told."""
    _prune(rule, state, now)
    grants, waiters = state["grants"], state["waiters"]
    mine = next((g for g in grants if g["key"] == key and not g["done"] and g["until"] > now),
                None)
    if mine is not None and mine.get("holder") == holder:  # the same attempt asking again
        mine["until"] = now + rule.lease
        return Verdict(True)
    if mine is not None:
        # Its worker died or lost the run mid-call: its request, if it went out, went
        # out before now, so it counts as ended now (its own end, if it comes, counts
        # from then: `finish`); this attempt is one more request and needs its own grant.
        mine.update(done=True, until=now, cut=True)
    since = waiters[key]["since"] if key in waiters else now
    waiters[key] = {"user": user, "since": since, "run": run, "due": now,
                    "expires": now + queue.WAITER_GRACE}
    order, times = queue.plan(rule, state, now)
    if times[order.index(key)][0] <= now:  # a slot is free now, and none ahead is owed it
        del waiters[key]
        grants.append({"key": key, "user": user, "at": now, "until": now + rule.lease,
                       "done": False, "tokens": 0, "holder": holder})
        state["served"][user] = now
        return Verdict(True, wakes=tuple(queue.reschedule(rule, state, now)))
    wakes = queue.reschedule(rule, state, now, asking=key, planned=(order, times))
    return Verdict(False, wake_at=waiters[key]["due"], why=_why(rule, state, times, now),
                   waiting=len(waiters), wakes=tuple(wakes))


def _why(rule: LimitRule, state: dict, times: list[tuple[float, bool]], now: float) -> str:
    """What holds a caller: the Retry-After, slots free now but owed to runs ahead
    ("turn"), or the first of the limit's rules that is full."""
    if state["closed_until"] > now:
        return "closed"
    if times and times[0][0] <= now:
        return "turn"
    grants = state["grants"]
    in_flight = [g for g in grants if not g["done"] and g["until"] > now]
    if rule.requests is not None and len(grants) >= rule.requests:
        return "requests"
    if rule.concurrency is not None and len(in_flight) >= rule.concurrency:
        return "concurrency"
    return "tokens"


def finish(rule: LimitRule, state: dict, key: str, now: float, tokens: int = 0,
           holder: int | None = None) -> Finished:
    """The call `key` of `holder` ended: its concurrency slot is free, its window counts
    from now (for an attempt cut off by a takeover, from now if that is later)."""
    _prune(rule, state, now)
    counted = _end_grant(state, key, now, int(tokens), holder)
    if counted:  # the estimate of a call in flight (tokens)
        state["largest"] = max(state.get("largest") or 0, int(tokens))
    return Finished(counted, tuple(queue.reschedule(rule, state, now)))


def _end_grant(state: dict, key: str, now: float, tokens: int, holder: int | None) -> bool:
    ours = [g for g in state["grants"] if g["key"] == key and g.get("holder") == holder]
    for g in ours:
        if not g["done"]:
            g.update(done=True, until=now, tokens=tokens)
            return True
    for g in ours:
        if g.get("cut"):
            g.update(until=max(g["until"], now), tokens=max(g["tokens"], tokens))
            return True
    return False


def close(rule: LimitRule, state: dict, until: float, now: float) -> tuple[Wake, ...]:
    """The provider said to come back at `until` (Retry-After): nobody goes before."""
    _prune(rule, state, now)
    state["closed_until"] = max(state["closed_until"], until)
    return tuple(queue.reschedule(rule, state, now))


# --- where the state lives -------------------------------------------------------------------
class LimitStore(Protocol):
    def update(self, name: str, change: Callable[[dict], Any]) -> Any:
        """Apply `change` to the limit's state (`empty_state()` the first time) atomically
        across every process that shares the store, save it, return what it returned."""


class MemoryLimitStore:
    """One process's limits (MemoryStore, tests)."""

    def __init__(self):
        self.states: dict[str, dict] = {}
        self._lock = threading.Lock()

    def update(self, name, change):
        with self._lock:
            state = copy.deepcopy(self.states.get(name) or empty_state())
            result = change(state)
            self.states[name] = state
            return result


# --- the gate --------------------------------------------------------------------------------
class LimitGate:
    """`rules(name)`: the configured rule of a limit, or None (then the tool is not limited).
    `wake(limit, wakes)`: move the timers of held runs earlier (never later), for the
    runs whose turn came sooner than they were told (the Django side's is
    runs/limits/wakes.py); without it, held runs come back only at their own timers.
    A run is told to come back `EARLY` before its slot, and a call whose slot opens
    within `EARLY` waits for it in its worker (`pause`, time.sleep) instead of a timer.

    It asks the store only for a tool that names a configured limit; put it last among
    the gates, so that a call another gate holds never takes a slot."""

    every_attempt = True  # an attempt after a durable retry wait is one more request

    def __init__(self, store: LimitStore, rules: Callable[[str], LimitRule | None],
                 clock: Callable[[], float] | None = None,
                 wake: Callable[[str, tuple[Wake, ...]], None] | None = None,
                 pause: Callable[[float], None] | None = None):
        self.store = store
        self.rules = rules
        # the engine's clock (a worker's is the database's: limit windows agree across
        # hosts), looked up per call: tests move time
        self.clock = clock or engine_clock.now
        self.wake = wake
        self.pause = pause or (lambda seconds: time.sleep(seconds))

    def _woken(self, rule: LimitRule, wakes: tuple[Wake, ...], now: float) -> None:
        if wakes and self.wake is not None:
            self.wake(rule.name, tuple(Wake(w.run, max(now, w.at - EARLY)) for w in wakes))

    def _rule(self, tool) -> LimitRule | None:
        name = getattr(tool, "limit", None)
        return self.rules(name) if name else None

    def check(self, call: GateCall) -> Decision:
        rule = self._rule(call.tool)
        if rule is None:
            return ALLOW
        for _ in range(IN_WORKER_ASKS):
            now = self.clock()
            try:
                verdict = self._admit(rule, call, now)
            except LimitStoreError as exc:
                # closed, not open: a limit nobody can count must not let a storm through;
                # the run waits (durably) and asks again
                return Hold("limit",
                            f"waiting for {rule.name}: its counter is unreachable ({exc})"[:500],
                            {"limit": rule.name, "why": "store", "tool": call.tool.name},
                            wait=True, wake_at=now + STORE_RETRY)
            self._woken(rule, verdict.wakes, now)
            if verdict.allowed:
                return ALLOW
            if verdict.wake_at - now > EARLY:
                break
            self.pause(verdict.wake_at - now)  # its slot opens within a second: wait here
        return self._held(rule, call, verdict, now)

    def _admit(self, rule: LimitRule, call: GateCall, now: float) -> Verdict:
        user = str(call.run.owner or "")
        return self.store.update(
            rule.name, lambda s: admit(rule, s, call.key, user, now, call.run.epoch, call.run.id))

    def _held(self, rule: LimitRule, call: GateCall, verdict: Verdict, now: float) -> Hold:
        message = f"waiting for {rule.name}: {rule.describe()}"
        if verdict.why == "closed":
            message = f"waiting for {rule.name}: the provider asked to wait (Retry-After)"
        wake_at = max(now + queue.MIN_WAIT, verdict.wake_at - EARLY)
        return Hold("limit", message[:500],
                    {"limit": rule.name, "why": verdict.why, "waiting": verdict.waiting,
                     "tool": call.tool.name, "wake_at": wake_at},
                    wait=True, wake_at=wake_at)

    def ended(self, tool, record, holder: int) -> None:
        """A call this gate let through (to `holder`) returned, failed or gave its worker up."""
        rule = self._rule(tool)
        if rule is None:
            return
        usage = record.usage or {}
        tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        now = self.clock()
        try:
            finished = self.store.update(
                rule.name, lambda s: finish(rule, s, record.key, now, tokens, holder))
        except LimitStoreError:
            log.warning("limit %s: the end of %s was not counted; its lease frees its slot",
                        rule.name, record.key)
            return
        self._woken(rule, finished.wakes, now)

    def attempt_failed(self, tool, record, exc: BaseException) -> None:
        """An attempt failed: a Retry-After from the provider closes the limit for all."""
        rule = self._rule(tool)
        wait = retry_after(exc)
        if rule is None or wait is None or math.isnan(wait) or wait <= 0:
            return
        now = self.clock()
        until = now + min(wait, RETRY_AFTER_LIMIT)
        try:
            wakes = self.store.update(rule.name, lambda s: close(rule, s, until, now))
        except LimitStoreError:
            log.warning("limit %s: a Retry-After of %s s could not close it", rule.name, wait)
            return
        self._woken(rule, wakes, now)
