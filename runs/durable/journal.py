"""What a session writes, and its one way to write it.

A step's effects, events and progress are buffered here and go with the next commit,
or now for an effect that must be in the log before the step goes on (an intent, an
outcome). Every commit is fenced by the claim's epoch: one refused (FencedError) marks
the lease lost, so that no more effect is made even if the agent swallows the error;
one that failed in the store ends the session (StoreFailure), whether it landed or not.

The calls of a ctx.parallel group log from threads of their own
(runs/durable/parallel.py): the buffers have a lock of their own (`_buffers`), held
only to touch them, and commits go one at a time (`_commits`). An outcome logged while
another thread commits waits for that commit, then finds itself already written if the
other took it along (a group commit: eight calls that finish together cost one write,
not eight).
"""

from __future__ import annotations

import threading

from . import clock, events, family
from . import records as r
from .errors import DurableError, FencedError, StoreFailure
from .lease import LeaseState
from .policies import metering


class Journal:
    def __init__(self, store, run: r.RunRecord, lease: LeaseState, lease_seconds: float):
        self.store, self.run, self.lease = store, run, lease
        self.lease_seconds = lease_seconds
        self._records: list[r.EffectRecord] = []
        self._events: list[events.Event] = []
        self._progress = r.RunChanges()  # the latest progress, and the ledger's usage
        self._commits = threading.RLock()  # one commit at a time
        self._buffers = threading.Lock()   # the three buffers above

    @property
    def epoch(self) -> int:
        return self.lease.held.epoch

    def log_effect(self, record: r.EffectRecord, *, usage: dict | None = None) -> None:
        """Write an effect (intent or outcome) now, with everything buffered before it;
        `usage`: a metered call's, added to the run's ledger in the same commit (under
        the buffers' lock, so parallel calls never lose one another's)."""
        with self._buffers:
            self._records.append(record)
            if usage is not None:
                self.run.usage = metering.added(self.run.usage, usage)
                self._progress.usage = self.run.usage
        with self._commits:
            with self._buffers:
                pending = any(e is record for e in self._records)
            if pending:
                self.commit(r.Commit())

    def buffer_record(self, record: r.EffectRecord) -> None:
        """now()/random() values: written with the next commit. Until then nothing
        durable depends on them, so losing them in a crash is harmless."""
        with self._buffers:
            self._records.append(record)

    def emit(self, event: events.Event) -> None:
        """An event, written with the next commit."""
        with self._buffers:
            self._events.append(event)

    def write_events(self, written: list[events.Event]) -> None:
        """Events written now (a streaming tool's batch: runs/durable/streaming.py)."""
        self.commit(r.Commit(events=list(written)))

    def set_progress(self, done, total, message: str) -> None:
        """The run's progress, written with the next commit (only the latest of a step)."""
        with self._buffers:
            self._progress = r.RunChanges(progress_done=done, progress_total=total,
                                          progress_message=message)
            self._events = [e for e in self._events if e[0] != "progress"]
            self._events.append(events.progress(done, total, message))

    def drop_buffered(self) -> None:
        """The step is cut short and will run again from its start: that replay re-emits
        what it buffered since its last logged effect (logs, progress, now()/random()),
        so writing it now would duplicate it."""
        with self._buffers:
            self._records, self._events, self._progress = [], [], r.RunChanges()

    def flush(self) -> None:
        if self._records or self._events or self._progress.fields():
            self.commit(r.Commit())

    def commit(self, commit: r.Commit) -> r.CommitResult:
        """`commit`, with everything buffered before it, fenced by the epoch. A commit that
        keeps the lease renews it; one that releases it reads the pending control."""
        with self._commits:
            with self._buffers:  # what is buffered now goes; later ones wait for the next
                taken = self._records, self._events, self._progress
                self._records, self._events, self._progress = [], [], r.RunChanges()
            self._add(commit, *taken)
            try:
                result = self._write(commit, taken)
            except FencedError:
                self.lease.lost()  # even if the agent swallows the error, no more effects
                raise
            except DurableError:
                raise
            except Exception as exc:
                raise StoreFailure() from exc
            if commit.release:
                self.lease.read_control(result.control)
            else:
                self.lease.renewed(commit.run.lease_expires_at, result.control)
            return result

    def _add(self, commit: r.Commit, records, buffered_events, progress: r.RunChanges) -> None:
        """The buffered records, events and progress go first in `commit`; a commit that
        keeps the lease extends it."""
        for record in records:
            record.epoch = self.epoch
        commit.family = commit.family or family.is_family_commit(commit, self.run)
        effect_events = [events.effect(e) for e in records if e.kind in (r.CALL, r.PATCH)]
        commit.effects = records + commit.effects
        commit.events = buffered_events + effect_events + commit.events
        if progress.fields():
            commit.run = commit.run.over(progress)
        if not commit.release and commit.run.lease_expires_at is r.KEEP:
            commit.run.lease_expires_at = clock.now() + self.lease_seconds

    def _write(self, commit: r.Commit, taken) -> r.CommitResult:
        try:
            return self.store.commit(self.run.id, self.epoch, commit)
        except BaseException:
            records, buffered_events, progress = taken
            with self._buffers:  # not written: still buffered, as before the commit
                self._records = records + self._records
                self._events = buffered_events + self._events
                self._progress = self._progress if self._progress.fields() else progress
            raise
        finally:
            for record in commit.effects:  # landed, or may have: written again, an upsert
                record.unwritten = False
