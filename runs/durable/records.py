"""The records the engine and a store exchange: plain data (an effect's record, with the
moves it may make, is runs/durable/effect.py).

Times are POSIX seconds (floats); a store converts them as it likes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# An effect's record, its kinds and statuses (runs/durable/effect.py), with the others
from .effect import (  # noqa: F401 - read as records.X by the stores and the pages
    CALL,
    DONE,
    ERROR,
    INPUT,
    INTENT,
    JOIN,
    NOW,
    PATCH,
    RANDOM,
    RETRYING,
    SLEEP,
    SPAWN,
    EffectRecord,
)

# Run statuses (docs/ARCHITECTURE.md)
QUEUED = "queued"
RUNNING = "running"
PAUSED = "paused"
WAITING = "waiting"
NEEDS_ATTENTION = "needs_attention"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STATUSES = (QUEUED, RUNNING, PAUSED, WAITING, NEEDS_ATTENTION, SUCCEEDED, FAILED, CANCELLED)
FINAL_STATUSES = (SUCCEEDED, FAILED, CANCELLED)

# Control requests a worker honours at its next effect boundary
PAUSE, CANCEL = "pause", "cancel"


@dataclass
class RunRecord:
    """One run. `step_no` counts completed steps; `branch` is the live branch."""

    id: str
    agent: str
    agent_version: str
    inputs: dict
    status: str = QUEUED
    branch: int = 1
    step_no: int = 0
    epoch: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    control: str | None = None
    output: Any = None
    error: dict | None = None
    attention: dict | None = None
    progress_done: float = 0
    progress_total: float = 0
    progress_message: str = ""
    wake_at: float | None = None
    crash_count: int = 0
    crash_step: int = -1
    crash_effects: int = 0  # with crash_step, the progress mark of the last claim
    event_seq: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    suspended_at: float | None = None
    owner: str = ""
    # The ledger (docs/budgets.md): what the run's metered calls used, summed in the
    # commit that logs each outcome, {"cost", "prompt_tokens", "completion_tokens",
    # "calls"}; and the run's budget, {"cost": dollars, "tokens": n}, either optional.
    usage: dict = field(default_factory=dict)
    budget: dict | None = None
    # A child run (docs/children.md): its parent, and the key of the parent's spawn
    # effect that launched it, unique, so that a replay finds the child it launched.
    parent_id: str | None = None
    spawn_key: str | None = None
    # The code the run belongs to (runs/durable/versions.py): a fingerprint of its
    # agent's code, beside the declared `agent_version`; and the fingerprint of a code
    # whose replay of the run's history diverged, so that its workers do not claim it.
    code_fingerprint: str = ""
    version_refused: str | None = None


@dataclass
class CheckpointRecord:
    """A snapshot of the state after `step_no` completed steps on `branch`."""

    number: int
    branch: int
    step_no: int
    blob: bytes
    codec: str
    reason: str = "step"
    parent_number: int | None = None
    created_at: float = 0.0
    base_number: int | None = None  # for a patch: the checkpoint it patches

    @property
    def size(self) -> int:
        return len(self.blob)


@dataclass
class AuditRecord:
    actor: str
    action: str
    reason: str = ""
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)


@dataclass
class Supersede:
    """Mark live effects dead: those after `after_step`, and those off the kept branches."""

    after_step: int
    keep_branches: tuple[int, ...]


class _Keep:
    """What a field of RunChanges holds when the commit leaves it as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@dataclass
class RunChanges:
    """The fields of the run a commit sets, by RunRecord's names (a store's column names);
    a field left KEEP is not written. None is a value: it clears the field."""

    status: str = KEEP
    output: Any = KEEP
    error: dict | None = KEEP
    attention: dict | None = KEEP
    control: str | None = KEEP
    step_no: int = KEEP
    branch: int = KEEP
    crash_count: int = KEEP
    crash_step: int = KEEP
    crash_effects: int = KEEP
    lease_expires_at: float | None = KEEP
    wake_at: float | None = KEEP
    suspended_at: float | None = KEEP
    progress_done: float = KEEP
    progress_total: float = KEEP
    progress_message: str = KEEP
    usage: dict = KEEP
    budget: dict | None = KEEP
    agent_version: str = KEEP
    code_fingerprint: str = KEEP
    version_refused: str | None = KEEP

    def fields(self) -> dict[str, Any]:
        """{name: value} of the fields set, in the order above. Read on every commit (by
        the journal and the store): by the names taken once, not dataclasses.fields."""
        values = self.__dict__
        return {name: values[name] for name in _RUN_CHANGE_NAMES if values[name] is not KEEP}

    def get(self, name: str, default=None):
        value = getattr(self, name)
        return default if value is KEEP else value

    def over(self, base: RunChanges) -> RunChanges:
        """These changes on top of `base`'s: where both set a field, these win."""
        return dataclasses.replace(base, **self.fields())


_RUN_CHANGE_NAMES = tuple(f.name for f in dataclasses.fields(RunChanges))


@dataclass
class Commit:
    """Everything one transition of a worker's session writes, in one transaction,
    fenced by the epoch. `checkpoint.number` is assigned by the store when it is 0."""

    run: RunChanges = field(default_factory=RunChanges)
    effects: list[EffectRecord] = field(default_factory=list)
    checkpoint: CheckpointRecord | None = None
    events: list[tuple[str, dict]] = field(default_factory=list)
    release: bool = False  # the lease goes: the run is no longer this session's
    # The commit ends a child run or waits on children: the store applies the family
    # rule (runs/durable/family.py) inside its transaction.
    family: bool = False
    # Apply only if the run still has this status: an operator decided on what it
    # saw, and releasing a run does not move its epoch.
    expect_status: str | None = None


@dataclass
class OperatorCommit(Commit):
    """An operator's action (runs/durable/control/): a Commit with its audit entry, and
    what it does to the run's course: it may take the run over (epoch + 1, fencing off
    the worker that holds it) and supersede effects (a rollback, an edit). Its result
    holds the run as committed."""

    audit: AuditRecord | None = None  # set by control's _act, which commits every action
    take_over: bool = False
    supersede: Supersede | None = None

    @classmethod
    def of(cls, commit: Commit, **action) -> OperatorCommit:
        """A worker's commit (what it writes) as an operator's action."""
        return cls(**{f.name: getattr(commit, f.name) for f in dataclasses.fields(Commit)},
                   **action)


@dataclass
class CommitResult:
    epoch: int
    event_seq: int
    control: str | None
    checkpoint_number: int | None = None
    # The run as the commit left it, for the caller to show without reading it back.
    # A store's fast path for a worker's own writes (no audit) may leave it None.
    run: RunRecord | None = None


@dataclass(frozen=True)
class LeaseHeld:
    """A lease as its holder knows it: renewed only while the run still has this epoch
    and this owner (Store.renew_leases)."""

    run_id: str
    epoch: int
    owner: str


@dataclass
class Claim:
    """A successful claim: the run with its new epoch and lease. `crashed` says the
    previous owner never released it (its lease ran out)."""

    run: RunRecord
    crashed: bool
    # what a resume needs, when the store read it with the claim (one round trip)
    loaded: Loaded | None = None


@dataclass
class Loaded:
    """What a resume needs: the run, its latest checkpoint on its branch, the effects since."""

    run: RunRecord
    checkpoint: CheckpointRecord | None
    effects: list[EffectRecord]
    # when `checkpoint` is a patch: the checkpoints it rests on, full one first
    bases: list[CheckpointRecord] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryQuery:
    """The parts of a run's history an operator action needs, so that it reads in
    proportion to what it changes, not to the run's length. History holds the union:

    forks          the checkpoints that start a branch (a parent set) and their
                   parents: every branch's lineage, one pair per fork
    checkpoint     this checkpoint and those its patch rests on
    superseded_by  the live effects this Supersede would mark
    step           the live effects of (branch, step_no)
    replay         what a replay of this branch needs (runs/durable/upgrade.py): its
                   checkpoints whose state no step made (the first, an on_resume's, an
                   upgrade's) with the bases of their patches, and all its live effects

    Effects come in log order (branch, step, seq), checkpoints by number.
    """

    forks: bool = False
    checkpoint: int | None = None
    superseded_by: Supersede | None = None
    step: tuple[int, int] | None = None
    replay: int | None = None


@dataclass
class History:
    """All checkpoints (without blobs' decoding) and effects of a run, for operators."""

    checkpoints: list[CheckpointRecord]
    effects: list[EffectRecord]
