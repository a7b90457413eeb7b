"""The budget rule: when a metered call may start, counting the calls in flight.

The cost of a call is known only once it returns, so a budget counts what is spent
(the ledger: runs/durable/policies/metering.py) and what may be spent by the calls already let
through and not logged yet, each at an *estimate*: the largest call of the same tool
seen so far under that budget (a tool never seen has no estimate: it may cost
anything). A metered call under a budget with limits `L`, spend `S`, calls in flight
with estimates `F` and its own estimate `E`:

  reached   S >= L for a unit: the call is not made, the run is held for a person;
  go        nothing is in flight: it may start alone, and it alone may cross the
            limit ("at most one call over");
  go        S + sum(F) + E <= L for every unit: it fits beside the calls in flight
            (far from the limit, parallel calls stay parallel);
  wait      otherwise: it waits for a call in flight to end, then is decided again.

So a budget is overshot by at most one call, as long as no call costs more than its
estimate (the largest of its tool seen so far); a call larger than any before it can
add its excess. `RunBudgetGate` (runs/durable/policies/gates.py) applies the rule to a run's
own budget with `InFlight` below; the quotas shared by runs apply it in the database
(runs/budgets/quotas.py). See docs/budgets.md.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

UNITS = ("cost", "tokens")
REACHED, GO, WAIT = "reached", "go", "wait"


def money(dollars: float) -> str:
    """$1.02, or four decimals under a dollar: a model call costs fractions of a cent."""
    dollars = float(dollars)
    if dollars == 0 or abs(dollars) >= 1:
        return f"${dollars:,.2f}"
    return f"${dollars:.4f}"


def spent_in(usage: dict | None, unit: str) -> float:
    usage = usage or {}
    if unit == "cost":
        return float(usage.get("cost") or 0)
    return float((usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0))


def reached(usage: dict | None, budget: dict | None) -> tuple[str, float, float] | None:
    """(unit, spent, limit) of the first limit of `budget` that `usage` reached, or None."""
    for unit in UNITS:
        limit = (budget or {}).get(unit)
        if limit is None:
            continue
        spent = spent_in(usage, unit)
        if spent >= float(limit):
            return unit, spent, float(limit)
    return None


def budget_message(unit: str, spent: float, limit: float, scope: str = "") -> str:
    what = f"{scope} budget reached" if scope else "budget reached"
    if unit == "cost":
        return f"{what}: {money(spent)} of {money(limit)}"
    return f"{what}: {int(spent):,} of {int(limit):,} tokens"


def estimate_of(usage: dict | None) -> dict | None:
    """A logged call's usage as an estimate of a later one: {"cost", "tokens"}."""
    if not usage:
        return None
    return {"cost": spent_in(usage, "cost"), "tokens": spent_in(usage, "tokens")}


def larger(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return a or b
    return {unit: max(a[unit], b[unit]) for unit in UNITS}


def _at(estimate: dict | None, unit: str) -> float:
    """An unknown estimate may be anything: it leaves room for nothing beside it."""
    value = None if estimate is None else estimate.get(unit)
    return math.inf if value is None else float(value)


@dataclass(frozen=True)
class Verdict:
    what: str                          # REACHED, GO or WAIT
    unit: str = ""                     # REACHED: the limit reached, its spend and value
    spent: float = 0.0
    limit: float = 0.0
    in_flight: int = 0                 # WAIT: the calls it waits for


def verdict(usage: dict | None, limits: dict | None, flying: list, estimate: dict | None
            ) -> Verdict:
    """The rule above. `usage` is the spend as the ledger keeps it ({"cost",
    "prompt_tokens", "completion_tokens"}), `flying` the estimates of the calls in
    flight (None: unknown), `estimate` this call's."""
    over = reached(usage, limits)
    if over is not None:
        return Verdict(REACHED, *over)
    if not flying:
        return Verdict(GO)
    for unit in UNITS:
        limit = (limits or {}).get(unit)
        if limit is None:
            continue
        total = spent_in(usage, unit) + sum(_at(f, unit) for f in flying) + _at(estimate, unit)
        if total > float(limit):
            return Verdict(WAIT, in_flight=len(flying))
    return Verdict(GO)


class InFlight:
    """A run's metered calls let through under its budget and not logged yet, in this
    process: a run has one owner at a time, so its own budget needs no shared state.
    Entries are per (run, epoch): a takeover's session never counts the calls of the
    one before it (they are not its to end)."""

    REMEMBERED = 4096  # runs whose largest calls are kept (the estimates)

    def __init__(self):
        self._lock = threading.Lock()
        self._calls: dict[str, dict[str, tuple[int, dict | None]]] = {}  # run -> key -> ...
        self._run_of: dict[str, str] = {}                                # key -> run
        self._largest: OrderedDict[tuple[str, str], dict] = OrderedDict()

    def admit(self, run_id: str, epoch: int, key: str, tool: str, usage: dict | None,
              limits: dict) -> Verdict:
        """Decide about the call `key` and, if it may go, count it in flight: atomic
        for the run's parallel calls (each asks from its own thread)."""
        with self._lock:
            calls = self._calls.setdefault(run_id, {})
            # only this owner's calls count: an earlier owner's are forgotten, a later
            # owner's left alone (the asker is a zombie, fenced at its next write)
            for stale in [k for k, (e, _) in calls.items() if e < epoch or k == key]:
                self._drop(run_id, stale)
            estimate = self._largest.get((run_id, tool))
            decided = verdict(usage, limits, [est for e, est in calls.values() if e == epoch],
                              estimate)
            if decided.what == GO:
                calls[key] = (epoch, estimate)
                self._run_of[key] = run_id
            elif not calls:
                self._calls.pop(run_id, None)
            return decided

    def ended(self, key: str, tool: str, usage: dict | None) -> bool:
        """The call `key` is no longer in flight (its usage, if any, is in the ledger
        now); its usage teaches the estimate of its tool. False: it was not counted."""
        with self._lock:
            run_id = self._run_of.get(key)
            if run_id is None:
                return False
            self._drop(run_id, key)
            if not self._calls.get(run_id):
                self._calls.pop(run_id, None)
            seen = estimate_of(usage)
            if seen is not None:
                slot = (run_id, tool)
                self._largest[slot] = larger(self._largest.get(slot), seen)
                self._largest.move_to_end(slot)
                while len(self._largest) > self.REMEMBERED:
                    self._largest.popitem(last=False)
            return True

    def _drop(self, run_id: str, key: str) -> None:
        self._calls.get(run_id, {}).pop(key, None)
        self._run_of.pop(key, None)


class Waiters:
    """Calls waiting for a call in flight to end (a gate's Wait), in this process: woken
    when one ends or is taken back, or when their parallel group stops."""

    def __init__(self):
        self._changed = threading.Condition()
        self._count = 0
        self._own = threading.local()  # wake-ups this thread made (see `mark`)

    def mark(self) -> int:
        """Where to wait from: the count of changes, less those this thread made since
        (a decision that took back its own call in flight is no news to itself)."""
        with self._changed:
            return self._count - getattr(self._own, "count", 0)

    def wake(self) -> None:
        with self._changed:
            self._count += 1
            self._own.count = getattr(self._own, "count", 0) + 1
            self._changed.notify_all()

    def wait(self, mark: int, timeout: float) -> None:
        """Until another thread changed something since `mark` (no wake-up is lost), or
        `timeout`."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._count - getattr(self._own, "count", 0) != mark, timeout)


waiters = Waiters()
