"""Shared limits per tool or provider: a pre-call gate (runs/durable/gates.py).

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
  * tokens: a metered call adds its tokens to its grant when it ends; a call is let
    through while the window's tokens are under the limit (a limit can be overshot by
    the one call that crossed it, as budgets are).
  * Retry-After: a provider that answered "too many requests, come back in N s" to
    one call closes the limit for every caller until then (`close`).
  * fairness, round robin over users: callers that find the limit full wait in a
    queue ordered by (when their user last got a slot, when they first asked). A
    free slot goes to the head of the queue, the user served least recently, so a
    user with one run goes before the next of another user's 500 runs, and two busy
    users take turns. A user's own calls go in the order they came. A waiter that
    does not come back (its run was cancelled) leaves the queue `WAITER_GRACE` after
    it was due.

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

from .gates import ALLOW, Decision, GateCall, Hold
from .retry import RETRY_AFTER_LIMIT, retry_after

log = logging.getLogger(__name__)

WAITER_GRACE = 30.0       # seconds a waiter keeps its place past its timer (claim latency)
CONCURRENCY_POLL = 1.0    # nobody knows when a call in flight ends: look again this often
TURN_POLL = 1.0           # a caller behind waiters that have not come back looks again
STORE_RETRY = 5.0         # the store did not answer: the held run asks again after this
MIN_WAIT = 0.05
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
          holder: int | None = None) -> Verdict:
    """Let the call `key` of `user` through (a grant) or queue it; changes `state`.
    `holder` is who makes the request (the run's fencing epoch): another holder asking
    about a call in flight is another request to the provider."""
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
    in_flight = [g for g in grants if not g["done"] and g["until"] > now]
    free, why = _free(rule, grants, in_flight)
    if state["closed_until"] > now:
        free, why = 0, "closed"
    served = state["served"]
    since = waiters[key]["since"] if key in waiters else now
    rank = (served.get(user, 0.0), since, key)
    ahead = [k for k, w in waiters.items()
             if k != key and (served.get(w["user"], 0.0), w["since"], k) < rank]
    if len(ahead) < free:
        waiters.pop(key, None)
        grants.append({"key": key, "user": user, "at": now, "until": now + rule.lease,
                       "done": False, "tokens": 0, "holder": holder})
        served[user] = now
        return Verdict(True)
    wake_at = max(now + MIN_WAIT, _wake_at(rule, state, grants, in_flight, len(ahead), now),
                  # not before those ahead of it have had their go
                  max((waiters[k]["due"] for k in ahead), default=now) + MIN_WAIT)
    if why == "" and free > 0:
        # slots are free but kept for waiters on their way back; if one never comes
        # (its run was cancelled), this caller looks again at a calm pace
        why, wake_at = "turn", max(wake_at, now + TURN_POLL)
    waiters[key] = {"user": user, "since": since, "due": wake_at,
                    "expires": wake_at + WAITER_GRACE}
    return Verdict(False, wake_at=wake_at, why=why, waiting=len(waiters))


def _free(rule: LimitRule, grants: list, in_flight: list) -> tuple[float, str]:
    """How many more calls may start now, and the constraint that binds first."""
    room: list[tuple[float, str]] = [(math.inf, "")]
    if rule.requests is not None:
        room.append((rule.requests - len(grants), "requests"))
    if rule.concurrency is not None:
        room.append((rule.concurrency - len(in_flight), "concurrency"))
    if rule.tokens is not None and sum(g["tokens"] for g in grants) >= rule.tokens:
        room.append((0, "tokens"))
    free, why = min(room, key=lambda item: item[0])
    return max(0, free), (why if free <= 0 else "")


def _wake_at(rule: LimitRule, state: dict, grants: list, in_flight: list, ahead: int,
             now: float) -> float:
    """When a caller with `ahead` waiters before it may find its slot: an estimate (the
    gate is asked again then and decides again), spreading the queue over the windows
    to come instead of waking every waiter at the first free slot."""
    wake = now
    if state["closed_until"] > now:
        wake = state["closed_until"]
    if rule.requests is not None:
        # a grant in flight leaves the window `per` after it ends, at the earliest now
        frees = sorted(now + rule.per if not g["done"] else g["until"] + rule.per
                       for g in grants)
        short = ahead - (rule.requests - len(grants))  # slots it needs beyond those free
        if short >= 0 and frees:
            rounds, index = divmod(short, rule.requests)
            wake = max(wake, frees[min(index, len(frees) - 1)] + rounds * rule.per)
    if rule.concurrency is not None and len(in_flight) + ahead >= rule.concurrency:
        wake = max(wake, now + CONCURRENCY_POLL * (1 + ahead // rule.concurrency))
    if rule.tokens is not None and sum(g["tokens"] for g in grants) >= rule.tokens:
        wake = max(wake, min(g["until"] if g["done"] else now for g in grants) + rule.per)
    return wake


def finish(rule: LimitRule, state: dict, key: str, now: float, tokens: int = 0,
           holder: int | None = None) -> bool:
    """The call `key` of `holder` ended: its concurrency slot is free, its window counts
    from now (for an attempt cut off by a takeover, from now if that is later)."""
    _prune(rule, state, now)
    ours = [g for g in state["grants"] if g["key"] == key and g.get("holder") == holder]
    for g in ours:
        if not g["done"]:
            g.update(done=True, until=now, tokens=int(tokens))
            return True
    for g in ours:
        if g.get("cut"):
            g.update(until=max(g["until"], now), tokens=max(g["tokens"], int(tokens)))
            return True
    return False


def close(rule: LimitRule, state: dict, until: float, now: float) -> None:
    """The provider said to come back at `until` (Retry-After): nobody goes before."""
    _prune(rule, state, now)
    state["closed_until"] = max(state["closed_until"], until)


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

    It asks the store only for a tool that names a configured limit; put it last among
    the gates, so that a call another gate holds never takes a slot."""

    every_attempt = True  # an attempt after a durable retry wait is one more request

    def __init__(self, store: LimitStore, rules: Callable[[str], LimitRule | None],
                 clock: Callable[[], float] | None = None):
        self.store = store
        self.rules = rules
        self.clock = clock or (lambda: time.time())  # looked up per call: tests move time

    def _rule(self, tool) -> LimitRule | None:
        name = getattr(tool, "limit", None)
        return self.rules(name) if name else None

    def check(self, call: GateCall) -> Decision:
        rule = self._rule(call.tool)
        if rule is None:
            return ALLOW
        now = self.clock()
        user = str(call.run.owner or "")
        try:
            verdict = self.store.update(
                rule.name, lambda s: admit(rule, s, call.key, user, now, call.run.epoch))
        except LimitStoreError as exc:
            # closed, not open: a limit nobody can count must not let a storm through;
            # the run waits (durably) and asks again
            return Hold("limit", f"waiting for {rule.name}: its counter is unreachable ({exc})"[:500],
                        {"limit": rule.name, "why": "store", "tool": call.tool.name},
                        wait=True, wake_at=now + STORE_RETRY)
        if verdict.allowed:
            return ALLOW
        message = f"waiting for {rule.name}: {rule.describe()}"
        if verdict.why == "closed":
            message = f"waiting for {rule.name}: the provider asked to wait (Retry-After)"
        return Hold("limit", message[:500],
                    {"limit": rule.name, "why": verdict.why, "waiting": verdict.waiting,
                     "tool": call.tool.name, "wake_at": verdict.wake_at},
                    wait=True, wake_at=verdict.wake_at)

    def ended(self, tool, record, holder: int) -> None:
        """A call this gate let through (to `holder`) returned, failed or gave its worker up."""
        rule = self._rule(tool)
        if rule is None:
            return
        usage = record.usage or {}
        tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        now = self.clock()
        try:
            self.store.update(rule.name,
                              lambda s: finish(rule, s, record.key, now, tokens, holder))
        except LimitStoreError:
            log.warning("limit %s: the end of %s was not counted; its lease frees its slot",
                        rule.name, record.key)

    def attempt_failed(self, tool, record, exc: BaseException) -> None:
        """An attempt failed: a Retry-After from the provider closes the limit for all."""
        rule = self._rule(tool)
        wait = retry_after(exc)
        if rule is None or wait is None or math.isnan(wait) or wait <= 0:
            return
        now = self.clock()
        until = now + min(wait, RETRY_AFTER_LIMIT)
        try:
            self.store.update(rule.name, lambda s: close(rule, s, until, now))
        except LimitStoreError:
            log.warning("limit %s: a Retry-After of %s s could not close it", rule.name, wait)
