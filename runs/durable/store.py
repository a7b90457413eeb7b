"""The storage protocol the engine talks to. Two implementations: `MemoryStore`
(runs/durable/memory.py) and the ORM store (runs/store.py); one contract suite
(tests/durable/contract.py) holds both to the same semantics.
"""

from __future__ import annotations

from typing import Protocol

from .records import Claim, Commit, CommitResult, History, HistoryQuery, Loaded, RunRecord


class Store(Protocol):
    def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a new queued run (id, agent, version, inputs set) with its first event."""

    def get(self, run_id: str) -> RunRecord:
        """The run alone (no checkpoint, no effect): what most operator actions decide
        on. Raises RunNotFoundError."""

    def load(self, run_id: str) -> Loaded:
        """The run, its latest checkpoint on the live branch, and the live effects of
        that branch after the checkpoint's step. Raises RunNotFoundError."""

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float) -> Claim | None:
        """Take the run if it is claimable (queued; running with an expired lease; waiting
        with a due timer) and no live lease is held: epoch + 1, lease to `owner`.
        A conditional update: None when someone else holds it or it is not runnable."""

    def commit(self, run_id: str, epoch: int, commit: Commit) -> CommitResult:
        """Apply a Commit in one transaction if the run's epoch is still `epoch`, else
        raise FencedError. Numbers the events, adds a "checkpoint" event for a
        checkpoint, returns the run's pending control request and, for a commit with
        an audit entry at least, the run as committed."""

    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        """Extend the lease if the epoch holds (else FencedError); return the control
        request (pause/cancel) waiting for the owner, if any."""

    def due_runs(self, now: float, limit: int = 100) -> list[str]:
        """Ids of runs a sweep should hand to a worker: queued and unleased, running
        with an expired lease, or waiting on a timer that is due."""

    def history(self, run_id: str, query: HistoryQuery | None = None) -> History:
        """Every checkpoint and effect of the run, oldest first, for operators; with a
        query, only the part it names (see HistoryQuery). Raises RunNotFoundError."""
