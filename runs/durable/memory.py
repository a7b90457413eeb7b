"""An in-memory Store: the reference semantics, fast enough for exhaustive tests."""

from __future__ import annotations

import copy
import threading
import time

from . import records as r
from . import serde
from .errors import FencedError, RunNotFoundError
from .faults import faults


class MemoryStore:
    def __init__(self):
        self._lock = threading.RLock()
        self.runs: dict[str, r.RunRecord] = {}
        self.checkpoints: dict[str, list[r.CheckpointRecord]] = {}
        self.effects: dict[str, dict[tuple, r.EffectRecord]] = {}
        self.events: dict[str, list[tuple[int, str, dict]]] = {}
        self.audit: dict[str, list[r.AuditRecord]] = {}
        self.keys: set[str] = set()

    # --- the protocol -----------------------------------------------------------------
    def create_run(self, run: r.RunRecord) -> r.RunRecord:
        with self._lock:
            if run.id in self.runs:
                raise ValueError(f"run {run.id} exists")
            run = copy.deepcopy(run)
            run.created_at = run.updated_at = run.created_at or time.time()
            self.runs[run.id] = run
            self.checkpoints[run.id] = []
            self.effects[run.id] = {}
            self.events[run.id] = []
            self.audit[run.id] = []
            self._append_events(run, [("status", {"status": run.status, "event": "launched"})])
            return copy.deepcopy(run)

    def load(self, run_id: str) -> r.Loaded:
        with self._lock:
            run = self._get(run_id)
            live = [c for c in self.checkpoints[run_id] if c.branch == run.branch]
            checkpoint = max(live, key=lambda c: (c.step_no, c.number)) if live else None
            after = checkpoint.step_no if checkpoint else 0
            effects = sorted((e for e in self.effects[run_id].values()
                              if e.branch == run.branch and e.step_no > after and not e.superseded),
                             key=lambda e: e.position)
            bases = serde.chain_to(checkpoint, self.checkpoints[run_id])[:-1] if checkpoint else []
            return r.Loaded(copy.deepcopy(run), copy.deepcopy(checkpoint), copy.deepcopy(effects),
                            copy.deepcopy(bases))

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float) -> r.Claim | None:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or not _claimable(run, now):
                return None
            crashed = run.lease_owner is not None
            run.epoch += 1
            run.lease_owner = owner
            run.lease_expires_at = now + lease_seconds
            run.updated_at = now
            return r.Claim(copy.deepcopy(run), crashed)

    def commit(self, run_id: str, epoch: int, commit: r.Commit) -> r.CommitResult:
        with self._lock:
            run = self._get(run_id)
            if run.epoch != epoch or (commit.expect_status and run.status != commit.expect_status):
                raise FencedError(run_id, epoch)
            staged = copy.deepcopy(run)  # all-or-nothing, like a transaction
            effects = dict(self.effects[run_id])
            checkpoints = list(self.checkpoints[run_id])
            if commit.take_over:
                staged.epoch += 1
            for name, value in commit.run.items():
                if not hasattr(staged, name):
                    raise AttributeError(f"RunRecord has no field {name}")
                setattr(staged, name, copy.deepcopy(value))
            if commit.release:
                staged.lease_owner = None
                staged.lease_expires_at = None
            if commit.supersede is not None:
                for position, effect in effects.items():
                    if _superseded_by(effect, commit.supersede):
                        effect = copy.deepcopy(effect)
                        effect.superseded = True
                        effects[position] = effect
            new_keys = set()
            for effect in commit.effects:
                existing = effects.get(effect.position)
                if existing is None and (effect.key in self.keys or effect.key in new_keys):
                    raise ValueError(f"duplicate idempotency key {effect.key}")
                new_keys.add(effect.key)
                effects[effect.position] = copy.deepcopy(effect)
            events = list(commit.events)
            number = None
            if commit.checkpoint is not None:
                checkpoint = copy.deepcopy(commit.checkpoint)
                checkpoint.number = checkpoint.number or len(checkpoints) + 1
                checkpoint.created_at = checkpoint.created_at or time.time()
                checkpoints.append(checkpoint)
                number = checkpoint.number
                faults.hit("after_checkpoint_before_event", run.agent)
                events.append(("checkpoint", _checkpoint_event(checkpoint)))
            staged.updated_at = time.time()
            # commit point
            self.runs[run_id] = staged
            self.effects[run_id] = effects
            self.checkpoints[run_id] = checkpoints
            self.keys |= new_keys
            self._append_events(staged, events)
            if commit.audit is not None:
                self.audit[run_id].append(copy.deepcopy(commit.audit))
            return r.CommitResult(staged.epoch, staged.event_seq, staged.control, number,
                                  copy.deepcopy(staged))

    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        with self._lock:
            run = self._get(run_id)
            if run.epoch != epoch:
                raise FencedError(run_id, epoch)
            run.lease_expires_at = lease_expires_at
            return run.control

    def due_runs(self, now: float, limit: int = 100) -> list[str]:
        with self._lock:
            due = [run for run in self.runs.values() if _claimable(run, now)]
            due.sort(key=lambda run: run.updated_at)
            return [run.id for run in due[:limit]]

    def get(self, run_id: str) -> r.RunRecord:
        with self._lock:
            return copy.deepcopy(self._get(run_id))

    def history(self, run_id: str, query: r.HistoryQuery | None = None) -> r.History:
        with self._lock:
            self._get(run_id)
            checkpoints, effects = self.checkpoints[run_id], self.effects[run_id].values()
            if query is not None:
                checkpoints = _queried_checkpoints(checkpoints, query)
                effects = sorted((e for e in effects if _queried_effect(e, query)),
                                 key=lambda e: e.position)
            else:
                effects = sorted(effects, key=lambda e: (e.started_at, e.position))
            return r.History(copy.deepcopy(checkpoints), copy.deepcopy(effects))

    def events_after(self, run_id: str, seq: int = 0) -> list[tuple[int, str, dict]]:
        with self._lock:
            return [e for e in self.events[run_id] if e[0] > seq]

    # --- internals ----------------------------------------------------------------------
    def _get(self, run_id: str) -> r.RunRecord:
        try:
            return self.runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None

    def _append_events(self, run: r.RunRecord, events) -> None:
        for kind, data in events:
            run.event_seq += 1
            self.events[run.id].append((run.event_seq, kind, copy.deepcopy(data)))


def _claimable(run: r.RunRecord, now: float) -> bool:
    if run.status not in r.CLAIMABLE_STATUSES:
        return False
    if run.status == r.WAITING and (run.wake_at is None or run.wake_at > now):
        return False
    if run.status == r.RUNNING and run.lease_owner is None:
        return True
    return run.lease_owner is None or (run.lease_expires_at or 0) <= now


def _superseded_by(effect: r.EffectRecord, supersede: r.Supersede) -> bool:
    if effect.superseded:
        return False
    return effect.step_no > supersede.after_step or effect.branch not in supersede.keep_branches


def _queried_checkpoints(checkpoints, query: r.HistoryQuery) -> list[r.CheckpointRecord]:
    forks = [c for c in checkpoints if query.forks and c.parent_number is not None]
    wanted = {c.number for c in forks} | {c.parent_number for c in forks}
    target = next((c for c in checkpoints if c.number == query.checkpoint), None)
    if target is not None:
        wanted |= {c.number for c in serde.chain_to(target, checkpoints)}
    return [c for c in checkpoints if c.number in wanted]


def _queried_effect(effect: r.EffectRecord, query: r.HistoryQuery) -> bool:
    if query.superseded_by is not None and _superseded_by(effect, query.superseded_by):
        return True
    return (not effect.superseded and query.step is not None
            and (effect.branch, effect.step_no) == tuple(query.step))


def _checkpoint_event(checkpoint: r.CheckpointRecord) -> dict:
    return {"number": checkpoint.number, "branch": checkpoint.branch,
            "step": checkpoint.step_no, "size": checkpoint.size, "reason": checkpoint.reason}
