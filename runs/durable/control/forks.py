"""Rollback and state edits: a run goes on from a checkpoint on a new branch, and what
the old branch did after it is superseded (never replayed again). What a rollback would
undo is previewed first; the children its undone spawns launched are cancelled or kept."""

from __future__ import annotations

from .. import clock, events, family
from .. import records as r
from ..errors import CheckpointNotFoundError, InputValidationError, InvalidTransitionError
from ..serde import check_serializable, checkpoint_state, encode_state
from ..state_patch import apply_patch, check_fresh, paths_of
from .act import act
from .lifecycle import cancel_children

CHILDREN_CHOICES = ("cancel", "keep")
# A call that happened, or may have (in doubt), has reached the outside world.
REACHED = (r.DONE, r.INTENT)


def rollback(store, run_id: str, *, checkpoint: int, actor: str, reason: str = "",
             resume: bool | None = None, children: str = "cancel") -> r.RunRecord:
    """Fork a new branch from `checkpoint`. `resume`: the new branch runs (True) or
    waits paused (False); None keeps a paused run paused (or one whose pause is
    pending) and lets any other run go on. `children`: what becomes of the child runs
    launched by the spawns it undoes (docs/children.md): "cancel" those that have not
    ended, or "keep" them running (they stay linked, nobody waits for them)."""
    if children not in CHILDREN_CHOICES:
        raise InputValidationError(f"children must be one of {', '.join(CHILDREN_CHOICES)}",
                                   field="children")
    details = {"checkpoint": checkpoint}
    undone: list[r.RunRecord] = []

    def decide(run):
        history = store.history(run_id, r.HistoryQuery(forks=True, checkpoint=checkpoint))
        target = numbered(run, history, checkpoint)
        goes_on = not stays_paused(run) if resume is None else resume
        details["then"] = "resume" if goes_on else "pause"
        commit = fork(run, history, target, checkpoint_state(target, history.checkpoints),
                      status=r.QUEUED if goes_on else r.PAUSED, reason="rollback")
        undone[:] = undone_children(store, run, history, commit.supersede)
        if undone:
            details["children"] = children
        return commit
    rolled_back = act(store, run_id, "rollback", actor, reason, decide, details=details)
    if children == "cancel" and undone:
        cancel_children(store, run_id, actor=actor, only={c.id for c in undone},
                        reason=f"rolled back past its spawn: {reason}".rstrip(": "))
    return rolled_back


def undone_children(store, run: r.RunRecord, history: r.History,
                    supersede: r.Supersede) -> list[r.RunRecord]:
    """The child runs launched by spawns that `supersede` undoes: those whose spawn key
    (their launch position) is on the run's live lineage and past the rollback's target.
    Read from the children, not the effect log: a rollback reads no effect."""
    live = set(lineage(history, run.branch))
    undone = []
    for child in store.children(run.id):
        branch, step_no = family.spawned_at(child)
        if branch in live and (step_no > supersede.after_step
                               or branch not in supersede.keep_branches):
            undone.append(child)
    return undone


def stays_paused(run: r.RunRecord) -> bool:
    """Whether a rollback leaves the run paused unless told otherwise."""
    return run.status == r.PAUSED or (run.status == r.RUNNING and run.control == r.PAUSE)


def rollback_preview(store, run_id: str, *, checkpoint: int) -> dict:
    """What a rollback to `checkpoint` undoes, for the operator to confirm: every call
    it supersedes (in log order) and, per tool, how many there are and how many of
    them were not idempotent and reached the outside world (done, or in doubt); and
    the child runs its undone spawns launched, which the rollback cancels or keeps."""
    run = store.get(run_id)
    history = store.history(run_id, r.HistoryQuery(forks=True, checkpoint=checkpoint))
    target = numbered(run, history, checkpoint)
    supersede = superseded_by(history, target, next_branch(run, history))
    undone = [e for e in store.history(run_id, r.HistoryQuery(superseded_by=supersede)).effects
              if e.kind == r.CALL]
    children = [{"run_id": c.id, "agent": c.agent, "status": c.status,
                 "ended": c.status in r.FINAL_STATUSES}
                for c in undone_children(store, run, history, supersede)]
    by_tool = _by_tool(undone)
    return {"checkpoint": target.number, "step": target.step_no, "branch": target.branch,
            "steps_undone": max(0, run.step_no - target.step_no),
            "stays_paused": stays_paused(run), "by_tool": by_tool,
            "not_idempotent": sum(t["not_idempotent"] for t in by_tool),
            "reached": sum(t["reached"] for t in by_tool),
            "children": children,
            "effects": [{"step": e.step_no, "seq": e.seq, "branch": e.branch, "tool": e.tool,
                         "key": e.key, "status": e.status, "idempotent": e.idempotent,
                         "args_preview": e.args_preview} for e in undone]}


def _by_tool(undone: list[r.EffectRecord]) -> list[dict]:
    """Per tool, most calls first: its calls, the not idempotent ones, and of those the
    ones that reached the outside world."""
    by_tool: dict[str, dict] = {}
    for e in undone:
        tool = by_tool.setdefault(e.tool, {"tool": e.tool, "calls": 0, "not_idempotent": 0,
                                           "reached": 0})
        tool["calls"] += 1
        tool["not_idempotent"] += not e.idempotent
        tool["reached"] += not e.idempotent and e.status in REACHED
    return sorted(by_tool.values(), key=lambda t: -t["calls"])


def edit_state(store, run_id: str, *, state, actor: str, reason: str = "") -> r.RunRecord:
    """Replace the working state: a new checkpoint on a new branch; the run is left paused."""
    if not isinstance(state, dict):
        raise InputValidationError("the state must be a JSON object")
    check_serializable(state)
    return _edit(store, run_id, lambda latest, current: state, actor, reason)


def patch_state(store, run_id: str, *, patch, actor: str, reason: str = "",
                checkpoint: int | None = None) -> r.RunRecord:
    """Edit the working state by a JSON Patch (RFC 6902), applied to the latest
    checkpoint's state: a new checkpoint on a new branch; the run is left paused.
    `checkpoint`: the checkpoint the edit was prepared on; if it is no longer the
    latest, the edit is refused (StaleEditError) rather than applied to another state.
    The audit entry holds the patch, not the state."""
    def edited(latest, current):
        check_fresh(run_id, checkpoint, latest.number)
        state = apply_patch(current(), patch)
        check_serializable(state)
        return state
    return _edit(store, run_id, edited, actor, reason,
                 details={"checkpoint": checkpoint, "paths": paths_of(patch), "patch": patch})


def _edit(store, run_id, edited, actor, reason, details=None) -> r.RunRecord:
    """`edited(latest, current)`: the new state, from the latest checkpoint and a
    function that decodes its state (read only by an edit that needs it)."""
    def decide(run):
        if run.status == r.RUNNING and run.lease_owner:
            raise InvalidTransitionError("edit the state of", run.status, "pause it first")
        loaded = store.load(run_id)
        latest = loaded.checkpoint
        if latest is None:
            raise InvalidTransitionError("fork", run.status, "the run has no checkpoint yet")
        state = edited(latest, lambda: checkpoint_state(latest, [*loaded.bases, latest]))
        return fork(run, forks_of(store, run_id), latest, state, status=r.PAUSED, reason="edit")
    return act(store, run_id, "edit_state", actor, reason, decide, details=details)


# --- a fork: what a rollback, an edit and an operator's upgrade commit -------------------------
def fork(run: r.RunRecord, history: r.History, target: r.CheckpointRecord, state, *,
         status: str, reason: str, extra: r.RunChanges | None = None) -> r.OperatorCommit:
    """A new branch from `target`, starting from `state`. `history` holds the forks
    (HistoryQuery.forks): the lineage of every branch. `extra`: more of the run's fields
    to set (they win over the fork's own)."""
    blob, codec = encode_state(state)
    branch = next_branch(run, history)
    checkpoint = r.CheckpointRecord(number=0, branch=branch, step_no=target.step_no, blob=blob,
                                    codec=codec, reason=reason, parent_number=target.number,
                                    created_at=clock.now())
    update = r.RunChanges(status=status, branch=branch, step_no=target.step_no, control=None,
                          error=None, attention=None, output=None, wake_at=None, crash_count=0,
                          suspended_at=clock.now())
    return r.OperatorCommit(run=extra.over(update) if extra is not None else update,
                            checkpoint=checkpoint,
                            supersede=superseded_by(history, target, branch),
                            events=[events.forked(reason, target, branch),
                                    events.status(status, reason=reason)],
                            take_over=True)


def forks_of(store, run_id: str) -> r.History:
    return store.history(run_id, r.HistoryQuery(forks=True))


def next_branch(run, history) -> int:
    return max([run.branch] + [c.branch for c in history.checkpoints]) + 1


def superseded_by(history, target: r.CheckpointRecord, branch: int) -> r.Supersede:
    """What forking `branch` from `target` marks dead: every effect after the target's
    step, and every effect off the target's lineage."""
    return r.Supersede(after_step=target.step_no,
                       keep_branches=tuple(lineage(history, target.branch)) + (branch,))


def lineage(history: r.History, branch: int) -> list[int]:
    """The branch and the branches it was forked from."""
    by_number = {c.number: c for c in history.checkpoints}
    found = [branch]
    while True:
        first = min((c for c in history.checkpoints if c.branch == found[-1]),
                    key=lambda c: c.number, default=None)
        parent = by_number.get(first.parent_number) if first and first.parent_number else None
        if parent is None or parent.branch in found:
            return found
        found.append(parent.branch)


def numbered(run, history, number: int) -> r.CheckpointRecord:
    """The checkpoint `number` of the run, in `history` (else CheckpointNotFoundError)."""
    found = next((c for c in history.checkpoints if c.number == number), None)
    if found is None:
        raise CheckpointNotFoundError(run.id, number)
    return found
