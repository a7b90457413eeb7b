"""The records the engine and a store exchange. Plain data, no behaviour.

Times are POSIX seconds (floats); a store converts them as it likes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

# Effect kinds and statuses
CALL, NOW, RANDOM, SLEEP, INPUT = "call", "now", "random", "sleep", "input"
# A child run launched (result: its id and agent), and the outcomes of the children a
# step waited for, in the order asked (docs/children.md).
SPAWN, JOIN = "spawn", "join"
INTENT, DONE, ERROR = "intent", "done", "error"
# A call whose last attempt failed and whose next waits on a durable timer: its
# `error` is the last error, its `result` {"wake_at", "first_at", "wait"}.
RETRYING = "retrying"

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


@dataclass
class EffectRecord:
    """A logged call at position (branch, step_no, seq)."""

    branch: int
    step_no: int
    seq: int
    kind: str
    tool: str
    digest: str
    key: str
    idempotent: bool
    status: str
    args_preview: str = ""
    args: Any = None
    result: Any = None
    error: dict | None = None
    attempts: int = 0
    started_at: float = 0.0
    finished_at: float | None = None
    resolution: str = ""
    superseded: bool = False
    worker: str = ""
    epoch: int = 0  # the writer's fencing epoch: audits prove no fenced write landed
    # a metered call's usage: {"model", "prompt_tokens", "completion_tokens", "cost"}
    usage: dict | None = None

    @property
    def position(self) -> tuple[int, int, int]:
        return (self.branch, self.step_no, self.seq)

    def describe(self) -> dict:
        return {"kind": self.kind, "tool": self.tool, "args_preview": self.args_preview,
                "digest": self.digest}


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


@dataclass
class Commit:
    """Everything one engine transition writes, in one transaction, fenced by epoch.

    `checkpoint.number` is assigned by the store when it is 0.
    """

    run: dict = field(default_factory=dict)
    effects: list[EffectRecord] = field(default_factory=list)
    checkpoint: CheckpointRecord | None = None
    events: list[tuple[str, dict]] = field(default_factory=list)
    audit: AuditRecord | None = None
    supersede: Supersede | None = None
    release: bool = False
    take_over: bool = False
    # The commit ends a child run or waits on children: the store applies the family
    # rule (runs/durable/family.py) inside its transaction.
    family: bool = False
    # Apply only if the run still has this status: an operator decided on what it
    # saw, and releasing a run does not move its epoch.
    expect_status: str | None = None


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

    Effects come in log order (branch, step, seq), checkpoints by number.
    """

    forks: bool = False
    checkpoint: int | None = None
    superseded_by: Supersede | None = None
    step: tuple[int, int] | None = None


@dataclass
class History:
    """All checkpoints (without blobs' decoding) and effects of a run, for operators."""

    checkpoints: list[CheckpointRecord]
    effects: list[EffectRecord]
