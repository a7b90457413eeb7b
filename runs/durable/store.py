"""The storage protocols the engine talks to.

`Store` is what the engine reads and writes: seven methods. `LeaseStore` is what keeps
a claim alive and finds the runs to claim: a session renews its own lease, a worker's
runtime renews many at once, expires a dead process's and lists the due runs.
Implementations: `MemoryStore` (runs/durable/memory.py), `OrmStore`
(runs/storage/orm.py: SQLite, PostgreSQL, and the other databases with UPDATE ...
RETURNING) and `PgStore` (runs/storage/pg.py, PostgreSQL); each is both. One contract
suite (tests/durable/contract.py) holds them all to the same semantics. Which runs are
claimable (claim, due_runs) is one rule: runs/durable/claimable.py.

A commit is a worker's (`Commit`: what its session writes) or an operator's
(`OperatorCommit`: an action with its audit entry, which may take the run over and
supersede effects), as PgStore writes the first in one statement and the second in a
transaction of several.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import (
    Claim,
    Commit,
    CommitResult,
    History,
    HistoryQuery,
    LeaseHeld,
    Loaded,
    RunRecord,
)
from .versions import Codes


class Store(Protocol):
    def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a new queued run (id, agent, version, inputs set) with its first event.
        A child run whose `spawn_key` is already taken is not inserted: the run that
        holds the key is returned (docs/children.md)."""

    def get(self, run_id: str) -> RunRecord:
        """The run alone (no checkpoint, no effect): what most operator actions decide
        on. Raises RunNotFoundError."""

    def load(self, run_id: str) -> Loaded:
        """The run, its latest checkpoint on the live branch, and the live effects of
        that branch after the checkpoint's step. Raises RunNotFoundError."""

    def children(self, run_id: str, *, active_only: bool = False) -> list[RunRecord]:
        """The child runs of the run (parent_id = run_id), oldest first; with
        `active_only`, those not in a final status (what a spawn counts against its cap)."""

    def history(self, run_id: str, query: HistoryQuery | None = None) -> History:
        """Every checkpoint and effect of the run, oldest first, for operators; with a
        query, only the part it names (see HistoryQuery). Raises RunNotFoundError."""

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float, *,
              codes: Codes | None = None) -> Claim | None:
        """Take the run if it is claimable (runs/durable/claimable.py: queued, running, or
        waiting on a due timer, and no live lease held) and, with `codes`, of a code the
        worker may claim (runs/durable/versions.py): epoch + 1, lease to `owner`.
        A conditional update: None when someone else holds it or it is not runnable."""

    def commit(self, run_id: str, epoch: int, commit: Commit) -> CommitResult:
        """Apply a Commit in one transaction if the run's epoch is still `epoch` (and, with
        `expect_status`, its status that one), else raise FencedError. An effect is
        written at its position; one with `moved_from` (carried over by an upgrade) is
        moved there, found by its key. Numbers the events, adds a "checkpoint" event for
        a checkpoint, returns the run's pending control request and, for an
        OperatorCommit, the run as committed (its audit entry written, the epoch moved on
        by a take-over, what it supersedes marked). In the same transaction, the family
        rule (runs/durable/family.py): a child reaching a final status wakes its parent
        waiting on it, and a parent committing a wait on children that one of them
        already ended is woken at once."""


class LeaseStore(Protocol):
    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        """Extend the lease if the epoch holds (else FencedError); return the control
        request (pause/cancel) waiting for the owner, if any."""

    def renew_leases(self, leases: Sequence[LeaseHeld],
                     lease_expires_at: float) -> dict[str, str | None]:
        """Extend, together, every lease still held as given: the run's epoch AND owner
        unchanged (a run claimed again, or released, is not leased again). Returns
        {run_id: control request} of the renewed ones; the others are lost to their
        holders. What a worker holding many runs renews them with."""

    def live_leases(self, owner_prefix: str, now: float) -> list[LeaseHeld]:
        """The leases alive at `now` (expiring after it) on runs not in a final status
        whose owner starts with `owner_prefix`: what a sweep checks against the processes
        of its host, to expire a dead one's at once (with renew_leases(..., now), which
        leaves alone a run claimed again since)."""

    def due_runs(self, now: float, limit: int = 100, *,
                 exclude: Sequence[str] = (), codes: Codes | None = None) -> list[str]:
        """Ids of the runs claimable at `now` (runs/durable/claimable.py; with `codes`, by
        a worker of those codes), the longest unchanged first, but for `exclude` (the runs
        a worker already holds): what a sweep hands to workers and free slots claim."""
