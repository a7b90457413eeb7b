"""Which runs a worker may claim: the rule, written once, as data.

A run is claimable at `now` when

  * it is queued or running, or waiting on a timer that is due (wake_at <= now;
    a run waiting for an answer has no timer and is never claimable), and
  * no live lease is held on it: no owner, or a lease that has run out
    (lease_expires_at <= now, or none at all).

The second half covers the worker that died between its claim and its first write:
the run keeps the status it had (queued, or waiting on its due timer) with the dead
worker's lease, and is claimable again once that lease runs out. Paused runs, runs
that need attention and finished runs are never claimable.

`RULE` is the rule as a small expression tree. `holds(run, now)` evaluates it on a
RunRecord (MemoryStore); runs/storage/claimable.py turns the same tree into a Django
Q and into SQL, so the claim, `Store.due_runs` and the worker runtime cannot
disagree on what a due run is.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import records as r


@dataclass(frozen=True)
class AnyOf:
    terms: tuple


@dataclass(frozen=True)
class AllOf:
    terms: tuple


@dataclass(frozen=True)
class In:
    field: str
    values: tuple


@dataclass(frozen=True)
class IsNull:
    field: str


@dataclass(frozen=True)
class Due:
    """`field` holds a time at or before `now` (a missing time is never due)."""

    field: str


RULE = AllOf((
    AnyOf((In("status", (r.QUEUED, r.RUNNING)),
           AllOf((In("status", (r.WAITING,)), Due("wake_at"))))),
    AnyOf((IsNull("lease_owner"), IsNull("lease_expires_at"), Due("lease_expires_at"))),
))


def holds(run: r.RunRecord, now: float, term=RULE) -> bool:
    """Whether `run` is claimable at `now` (or satisfies `term`)."""
    if isinstance(term, AllOf):
        return all(holds(run, now, t) for t in term.terms)
    if isinstance(term, AnyOf):
        return any(holds(run, now, t) for t in term.terms)
    value = getattr(run, term.field)
    if isinstance(term, In):
        return value in term.values
    if isinstance(term, IsNull):
        return value is None
    if isinstance(term, Due):
        return value is not None and value <= now
    raise TypeError(f"not a term of the claim rule: {term!r}")
