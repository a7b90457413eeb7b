"""Which runs a worker may claim: the rule, written twice side by side, in Python (the
memory store, the worker runtime) and in SQL (the database stores' claim and due runs).
The contract holds the two together on every store: `test_which_runs_are_claimable_is_
one_rule_for_due_runs_and_claim` (tests/durable/contract.py) lists every case.

A run is claimable at `now` when

  * it is queued or running, or waiting on a timer that is due (wake_at <= now;
    a run waiting for an answer has no timer and is never claimable), and
  * no live lease is held on it: no owner, or a lease that has run out
    (lease_expires_at <= now, or none at all).

The second half covers the worker that died between its claim and its first write:
the run keeps the status it had (queued, or waiting on its due timer) with the dead
worker's lease, and is claimable again once that lease runs out. Paused runs, runs
that need attention and finished runs are never claimable.
"""

from __future__ import annotations

from . import records as r


def holds(run: r.RunRecord, now: float) -> bool:
    """Whether `run` is claimable at `now`."""
    runnable = run.status in (r.QUEUED, r.RUNNING) or (
        run.status == r.WAITING and run.wake_at is not None and run.wake_at <= now)
    unleased = (run.lease_owner is None or run.lease_expires_at is None
                or run.lease_expires_at <= now)
    return runnable and unleased


# The same rule as a condition on the runs table (its columns are RunRecord's names), to
# be given sql_params(now): a missing time compares as unknown, so it is never due.
SQL = ("(status IN (%s, %s) OR (status = %s AND wake_at <= %s)) "
       "AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= %s)")


def sql_params(now) -> list:
    """SQL's parameters, `now` as the database compares it (a datetime on Django's)."""
    return [r.QUEUED, r.RUNNING, r.WAITING, now, now]
