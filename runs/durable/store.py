"""The storage protocol the engine talks to. Implementations: `MemoryStore`
(runs/durable/memory.py), `OrmStore` (runs/storage/orm.py, any Django database) and
`PgStore` (runs/storage/pg.py, PostgreSQL); one contract suite
(tests/durable/contract.py) holds them all to the same semantics. Which runs are
claimable (claim, due_runs) is one rule for all of them: runs/durable/claimable.py.
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


class Store(Protocol):
    def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a new queued run (id, agent, version, inputs set) with its first event.
        A child run whose `spawn_key` is already taken is not inserted: the run that
        holds the key is returned (docs/children.md)."""

    def children(self, run_id: str, *, active_only: bool = False) -> list[RunRecord]:
        """The child runs of the run (parent_id = run_id), oldest first; with
        `active_only`, those not in a final status (what a spawn counts against its cap)."""

    def get(self, run_id: str) -> RunRecord:
        """The run alone (no checkpoint, no effect): what most operator actions decide
        on. Raises RunNotFoundError."""

    def load(self, run_id: str) -> Loaded:
        """The run, its latest checkpoint on the live branch, and the live effects of
        that branch after the checkpoint's step. Raises RunNotFoundError."""

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float) -> Claim | None:
        """Take the run if it is claimable (runs/durable/claimable.py: queued, running, or
        waiting on a due timer, and no live lease held): epoch + 1, lease to `owner`.
        A conditional update: None when someone else holds it or it is not runnable."""

    def commit(self, run_id: str, epoch: int, commit: Commit) -> CommitResult:
        """Apply a Commit in one transaction if the run's epoch is still `epoch`, else
        raise FencedError. Numbers the events, adds a "checkpoint" event for a
        checkpoint, returns the run's pending control request and, for a commit with
        an audit entry at least, the run as committed. In the same transaction, the
        family rule (runs/durable/family.py): a child reaching a final status wakes its
        parent waiting on it, and a parent committing a wait on children that one of
        them already ended is woken at once."""

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
                 exclude: Sequence[str] = ()) -> list[str]:
        """Ids of the runs claimable at `now` (runs/durable/claimable.py), the longest
        unchanged first, but for `exclude` (the runs a worker already holds): what a
        sweep hands to workers and free slots claim."""

    def history(self, run_id: str, query: HistoryQuery | None = None) -> History:
        """Every checkpoint and effect of the run, oldest first, for operators; with a
        query, only the part it names (see HistoryQuery). Raises RunNotFoundError."""

    def close_thread_resources(self) -> None:
        """The calling thread is done with the store (a thread of the engine's own, such
        as a LeaseRenewer, before it ends): a store with per-thread connections closes
        this thread's."""
