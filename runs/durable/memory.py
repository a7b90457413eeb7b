"""An in-memory Store: the reference semantics, fast enough for exhaustive tests."""

from __future__ import annotations

import copy
import threading

from . import claimable, clock, family, serde
from . import events as ev
from . import records as r
from .errors import FencedError, RunNotFoundError
from .faults import faults
from .verify import replayed_from
from .versions import Codes


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
            launched = next((c for c in self.runs.values()
                             if run.spawn_key and c.spawn_key == run.spawn_key), None)
            if launched is not None:
                return copy.deepcopy(launched)
            if run.id in self.runs:
                raise ValueError(f"run {run.id} exists")
            run = copy.deepcopy(run)
            run.created_at = run.updated_at = run.created_at or clock.now()
            self.runs[run.id] = run
            self.checkpoints[run.id] = []
            self.effects[run.id] = {}
            self.events[run.id] = []
            self.audit[run.id] = []
            self._append_events(run, [ev.status(run.status, event="launched")])
            return copy.deepcopy(run)

    def children(self, run_id: str, *, active_only: bool = False) -> list[r.RunRecord]:
        with self._lock:
            found = [c for c in self.runs.values() if c.parent_id == run_id
                     and not (active_only and c.status in r.FINAL_STATUSES)]
            return copy.deepcopy(sorted(found, key=lambda c: (c.created_at, c.id)))

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

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float, *,
              codes: Codes | None = None) -> r.Claim | None:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or not claimable.holds(run, now) or not _admitted(run, codes):
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
            action = commit if isinstance(commit, r.OperatorCommit) else None
            # all-or-nothing, like a transaction: staged, then swapped in at once
            staged = _staged_run(run, commit, action)
            effects, new_keys = self._staged_effects(run_id, commit.effects, action)
            checkpoints = list(self.checkpoints[run_id])
            events = list(commit.events)
            number = None
            if commit.checkpoint is not None:
                number = _add_checkpoint(checkpoints, commit.checkpoint)
                faults.hit("after_checkpoint_before_event", run.agent)
                events.append(ev.checkpoint(commit.checkpoint, number))
            staged.updated_at = clock.now()
            parent = self._family(run, staged)
            # commit point
            self.runs[run_id] = staged
            self.effects[run_id] = effects
            self.checkpoints[run_id] = checkpoints
            self.keys |= new_keys
            if parent is not None:
                parent.wake_at = staged.updated_at
            self._append_events(staged, events)
            if action is not None and action.audit is not None:
                self.audit[run_id].append(copy.deepcopy(action.audit))
            return r.CommitResult(staged.epoch, staged.event_seq, staged.control, number,
                                  copy.deepcopy(staged))

    def _staged_effects(self, run_id: str, written: list[r.EffectRecord],
                        action: r.OperatorCommit | None) -> tuple[dict, set[str]]:
        """The run's effects as the commit leaves them, and the keys it adds."""
        effects = dict(self.effects[run_id])
        if action is not None and action.supersede is not None:
            for position, effect in effects.items():
                if _superseded_by(effect, action.supersede):
                    effects[position] = copy.deepcopy(effect).superseding()
        new_keys = set()
        for effect in written:
            if effect.moved_from is not None:  # carried over: moves under its own key
                _move(effects, effect)
                continue
            existing = effects.get(effect.position)
            if existing is None and (effect.key in self.keys or effect.key in new_keys):
                raise ValueError(f"duplicate idempotency key {effect.key}")
            new_keys.add(effect.key)
            effects[effect.position] = copy.deepcopy(effect)
        return effects, new_keys

    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        with self._lock:
            run = self._get(run_id)
            if run.epoch != epoch:
                raise FencedError(run_id, epoch)
            run.lease_expires_at = lease_expires_at
            return run.control

    def renew_leases(self, leases, lease_expires_at: float) -> dict[str, str | None]:
        with self._lock:
            renewed = {}
            for lease in leases:
                run = self.runs.get(lease.run_id)
                if run is not None and (run.epoch, run.lease_owner) == (lease.epoch, lease.owner):
                    run.lease_expires_at = lease_expires_at
                    renewed[run.id] = run.control
            return renewed

    def live_leases(self, owner_prefix: str, now: float) -> list[r.LeaseHeld]:
        with self._lock:
            return [r.LeaseHeld(run.id, run.epoch, run.lease_owner)
                    for run in self.runs.values()
                    if run.lease_owner is not None and run.lease_owner.startswith(owner_prefix)
                    and run.lease_expires_at is not None and run.lease_expires_at > now
                    and run.status not in r.FINAL_STATUSES]

    def due_runs(self, now: float, limit: int = 100, *, exclude=(),
                 codes: Codes | None = None) -> list[str]:
        with self._lock:
            excluded = set(exclude)
            due = [run for run in self.runs.values()
                   if run.id not in excluded and claimable.holds(run, now)
                   and _admitted(run, codes)]
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
    def _family(self, before: r.RunRecord, staged: r.RunRecord) -> r.RunRecord | None:
        """The family rule (runs/durable/family.py), under the store's lock: the parent to
        wake at the commit point, if any; a wait whose child already ended is woken."""
        if staged.status == r.WAITING:
            final = {i for i in family.pending(staged.attention)
                     if i in self.runs and self.runs[i].status in r.FINAL_STATUSES}
            if family.woken_at_once(staged.attention, final):
                staged.wake_at = staged.updated_at
        if staged.status in r.FINAL_STATUSES and before.status not in r.FINAL_STATUSES \
                and staged.parent_id in self.runs:
            parent = self.runs[staged.parent_id]
            if family.wakes(parent.status, parent.attention, staged.id):
                return parent
        return None

    def _get(self, run_id: str) -> r.RunRecord:
        try:
            return self.runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None

    def _append_events(self, run: r.RunRecord, events) -> None:
        for kind, data in events:
            run.event_seq += 1
            self.events[run.id].append((run.event_seq, kind, copy.deepcopy(data)))


def _staged_run(run: r.RunRecord, commit: r.Commit,
               action: r.OperatorCommit | None) -> r.RunRecord:
    staged = copy.deepcopy(run)
    if action is not None and action.take_over:
        staged.epoch += 1
    for name, value in commit.run.fields().items():
        setattr(staged, name, copy.deepcopy(value))
    if commit.release:
        staged.lease_owner = None
        staged.lease_expires_at = None
    return staged


def _add_checkpoint(checkpoints: list, written: r.CheckpointRecord) -> int:
    """`written` numbered (the run's count of checkpoints, unless the engine chose one)
    and added to `checkpoints`; its number."""
    checkpoint = copy.deepcopy(written)
    checkpoint.number = checkpoint.number or len(checkpoints) + 1
    checkpoint.created_at = checkpoint.created_at or clock.now()
    checkpoints.append(checkpoint)
    return checkpoint.number


def _admitted(run: r.RunRecord, codes: Codes | None) -> bool:
    return codes is None or codes.admits(run)


def _move(effects: dict, effect: r.EffectRecord) -> None:
    """An effect written at a new position under its key: the one stored under that key
    goes there (runs/durable/upgrade.py)."""
    old = next((p for p, e in effects.items() if e.key == effect.key), None)
    if old is None:
        raise ValueError(f"no effect holds the key {effect.key} to move")
    del effects[old]
    moved = copy.deepcopy(effect)
    moved.moved_from = None
    effects[moved.position] = moved


def _superseded_by(effect: r.EffectRecord, supersede: r.Supersede) -> bool:
    if effect.superseded:
        return False
    return effect.step_no > supersede.after_step or effect.branch not in supersede.keep_branches


def _queried_checkpoints(checkpoints, query: r.HistoryQuery) -> list[r.CheckpointRecord]:
    forks = [c for c in checkpoints if query.forks and c.parent_number is not None]
    wanted = {c.number for c in forks} | {c.parent_number for c in forks}
    targets = [c for c in checkpoints if c.number == query.checkpoint]
    if query.replay is not None:
        targets += replayed_from(c for c in checkpoints if c.branch == query.replay)
    for target in targets:
        wanted |= {c.number for c in serde.chain_to(target, checkpoints)}
    return [c for c in checkpoints if c.number in wanted]


def _queried_effect(effect: r.EffectRecord, query: r.HistoryQuery) -> bool:
    if query.superseded_by is not None and _superseded_by(effect, query.superseded_by):
        return True
    if not effect.superseded and query.replay is not None and effect.branch == query.replay:
        return True
    return (not effect.superseded and query.step is not None
            and (effect.branch, effect.step_no) == tuple(query.step))
