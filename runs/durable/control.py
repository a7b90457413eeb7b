"""Launch and operator actions, on any Store.

Each action reads the run, decides, and commits conditionally on the epoch it
read; if a worker claimed the run in between (FencedError), it reads again.
An action reads the run row and only the part of its history it changes (a
HistoryQuery), never the whole log: a pause costs the same on a run of a
hundred effects as on one of a hundred thousand.
Actions that rewrite a run's course (rollback, resolve, edit, upgrade, and
stopping a run that no worker holds) take the run over: the epoch moves on,
so a worker still holding the old epoch can write nothing more.
"""

from __future__ import annotations

import time
import uuid

from . import events, family, observe
from . import records as r
from .errors import (
    CheckpointNotFoundError,
    EffectNotFoundError,
    FencedError,
    InputValidationError,
    InvalidTransitionError,
)
from .registry import AgentRegistry, validate_inputs
from .registry import registry as default_registry
from .serde import check_serializable, checkpoint_state, dumps, encode_state
from .state_patch import apply_patch, check_fresh, paths_of

ATTEMPTS = 5
RESOLUTIONS = ("done", "retry", "skip")
MAX_INPUT_BYTES = 256 * 1024
# A call that happened, or may have (in doubt), has reached the outside world.
REACHED = (r.DONE, r.INTENT)


def launch(store, *, agent: str, inputs, owner: str = "", run_id: str | None = None,
           registry: AgentRegistry = default_registry,
           max_input_bytes: int = MAX_INPUT_BYTES, budget: dict | None = None,
           parent_id: str | None = None, spawn_key: str | None = None) -> r.RunRecord:
    """`budget`: the run's budget (docs/budgets.md); None takes the agent's default.
    `parent_id`, `spawn_key`: a child run launched by its parent's spawn effect
    (docs/children.md); the store returns the child already launched under the key."""
    agent_cls = type(registry.get(agent))
    budget = check_budget(agent_cls.default_budget if budget is None else budget)
    validated = validate_inputs(agent_cls, inputs)
    check_serializable(validated, "inputs")
    size = len(dumps(validated).encode())
    if size > max_input_bytes:
        raise InputValidationError(f"inputs are too large: {size} bytes, over the limit of "
                                   f"{max_input_bytes} bytes")
    run = r.RunRecord(id=run_id or uuid.uuid4().hex, agent=agent,
                      agent_version=str(agent_cls.version), inputs=validated, owner=owner,
                      budget=budget, parent_id=parent_id, spawn_key=spawn_key)
    created = store.create_run(run)
    observe.current().launched(created)
    return created


def pause(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    def decide(run):
        if run.status == r.RUNNING:
            return r.Commit(run={"control": r.PAUSE}, events=[events.control("pause")])
        if run.status in (r.QUEUED, r.WAITING):
            return r.Commit(run={"status": r.PAUSED, "control": None, "suspended_at": time.time()},
                            events=[events.status(r.PAUSED, reason="paused")],
                            take_over=True)
        raise InvalidTransitionError("pause", run.status)
    return _act(store, run_id, "pause", actor, reason, decide)


def resume(store, run_id: str, *, actor: str, reason: str = "", upgrade: bool = False,
           registry: AgentRegistry = default_registry) -> r.RunRecord:
    """Resume a paused run, retry a failed one from its last checkpoint, or continue one
    that needs attention. `upgrade` continues on the agent's current version from the
    last checkpoint on a new branch (after "code changed" or a non-determinism error)."""

    def decide(run):
        if upgrade:
            if run.status in r.FINAL_STATUSES and run.status != r.FAILED:
                raise InvalidTransitionError("upgrade", run.status)
            version = str(type(registry.get(run.agent)).version)
            loaded = store.load(run_id)
            if loaded.checkpoint is None:
                # It never started: no code of the old version ran, so start afresh.
                return r.Commit(run={"status": r.QUEUED, "agent_version": version,
                                     "control": None, "attention": None, "error": None,
                                     "crash_count": 0},
                                events=[events.status(r.QUEUED, reason="upgrade")],
                                take_over=True)
            latest = loaded.checkpoint
            return _fork(run, _forks(store, run_id), latest,
                         checkpoint_state(latest, [*loaded.bases, latest]),
                         status=r.QUEUED, reason="upgrade", extra={"agent_version": version})
        attention = (run.attention or {}).get("kind")
        queued = {"status": r.QUEUED, "control": None, "attention": None, "error": None,
                  "crash_count": 0}
        event = events.status(r.QUEUED, reason="resumed")
        if run.status == r.PAUSED:
            return r.Commit(run=queued, events=[event], take_over=True)
        if run.status == r.RUNNING and run.control == r.PAUSE:
            return r.Commit(run={"control": None}, events=[events.control("resume")])
        if run.status == r.FAILED:
            retried = [_with(e, resolution="retry") for e in store.load(run_id).effects
                       if e.status == r.ERROR]
            return r.Commit(run=queued, effects=retried, events=[event], take_over=True)
        if run.status == r.NEEDS_ATTENTION:
            if attention == "version_drift":
                raise InvalidTransitionError("resume", run.status, "the agent's code changed: "
                                             "continue on the new version (upgrade) or roll back")
            if attention == "in_doubt":
                raise InvalidTransitionError("resume", run.status, "resolve the in-doubt effect "
                                             "first (done / retry / skip) or roll back")
            return r.Commit(run=queued, events=[event], take_over=True)
        raise InvalidTransitionError("resume", run.status)
    return _act(store, run_id, "upgrade" if upgrade else "resume", actor, reason, decide)


def cancel(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Cancel the run and, with it, every child of it that has not ended (and theirs)."""
    cancelled = _cancel(store, run_id, actor=actor, reason=reason)
    cancel_children(store, run_id, actor=actor, reason=reason)
    return cancelled


def cancel_children(store, run_id: str, *, actor: str, reason: str = "",
                    only: set[str] | None = None) -> list[str]:
    """Cancel the children of the run that have not ended (those in `only`, if given),
    each with its own audit entry and its own children: the ids cancelled."""
    cancelled = []
    for child in store.children(run_id, active_only=True):
        if only is not None and child.id not in only:
            continue
        try:
            cancel(store, child.id, actor=actor,
                   reason=f"parent run {run_id} cancelled" + (f": {reason}" if reason else ""))
        except InvalidTransitionError:
            continue  # it ended meanwhile
        cancelled.append(child.id)
    return cancelled


def _cancel(store, run_id: str, *, actor: str, reason: str) -> r.RunRecord:
    def decide(run):
        if run.status == r.RUNNING:
            return r.Commit(run={"control": r.CANCEL}, events=[events.control("cancel")])
        if run.status in r.FINAL_STATUSES:
            raise InvalidTransitionError("cancel", run.status)
        # What it waited for (a retry, an answer) or needed is over: no attention left.
        return r.Commit(run={"status": r.CANCELLED, "control": None, "wake_at": None,
                             "attention": None},
                        events=[events.status(r.CANCELLED, reason="cancelled")],
                        take_over=True)
    return _act(store, run_id, "cancel", actor, reason, decide)


CHILDREN_CHOICES = ("cancel", "keep")


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
        target = _checkpoint(run, history, checkpoint)
        goes_on = not stays_paused(run) if resume is None else resume
        details["then"] = "resume" if goes_on else "pause"
        commit = _fork(run, history, target, checkpoint_state(target, history.checkpoints),
                       status=r.QUEUED if goes_on else r.PAUSED, reason="rollback")
        undone[:] = undone_children(store, run, history, commit.supersede)
        if undone:
            details["children"] = children
        return commit
    rolled_back = _act(store, run_id, "rollback", actor, reason, decide, details=details)
    if children == "cancel" and undone:
        cancel_children(store, run_id, actor=actor, only={c.id for c in undone},
                        reason=f"rolled back past its spawn: {reason}".rstrip(": "))
    return rolled_back


def undone_children(store, run: r.RunRecord, history: r.History,
                    supersede: r.Supersede) -> list[r.RunRecord]:
    """The child runs launched by spawns that `supersede` undoes: those whose spawn key
    (their launch position) is on the run's live lineage and past the rollback's target.
    Read from the children, not the effect log: a rollback reads no effect."""
    live = set(_lineage(history, run.branch))
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
        return _fork(run, _forks(store, run_id), latest, state, status=r.PAUSED, reason="edit")
    return _act(store, run_id, "edit_state", actor, reason, decide, details=details)


def resolve_effect(store, run_id: str, *, seq: int, resolution: str, actor: str, reason: str = "",
                   result=None) -> r.RunRecord:
    """The operator's answer to an in-doubt effect: it happened (with `result`), retry it
    with the same idempotency key, or skip it (the call returns `result`, default None)."""
    if resolution not in RESOLUTIONS:
        raise InputValidationError(f"resolution must be one of {', '.join(RESOLUTIONS)}",
                                   field="resolution")
    check_serializable(result, "result")

    def decide(run):
        attention = run.attention or {}
        if run.status != r.NEEDS_ATTENTION or attention.get("kind") != "in_doubt":
            raise InvalidTransitionError("resolve an effect of", run.status,
                                         "only a run with an in-doubt effect can be resolved")
        step_no = attention.get("step_no")
        effect = next((e for e in _step_effects(store, run, step_no)
                       if e.seq == seq and e.status == r.INTENT), None)
        if effect is None:
            raise EffectNotFoundError(run_id, f"at step {step_no}, seq {seq}")
        if resolution == "retry":
            resolved = _with(effect, resolution="retry")
        else:
            resolved = _with(effect, status=r.DONE, result=result, resolution=resolution,
                             finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "attention": None, "crash_count": 0},
                        effects=[resolved],
                        events=[events.resolved(resolved, resolution),
                                events.status(r.QUEUED, reason=f"resolved: {resolution}")],
                        take_over=True)
    return _act(store, run_id, "resolve", actor, reason, decide,
                details={"seq": seq, "resolution": resolution, "result": result})


def provide_input(store, run_id: str, *, value, actor: str) -> r.RunRecord:
    """A user's answer to wait_for_input, validated against the prompt's schema."""
    check_serializable(value, "input")

    def decide(run):
        waiting = run.attention or {}
        if run.status != r.WAITING or waiting.get("kind") != "input":
            raise InvalidTransitionError("answer", run.status, "the run is not waiting for input")
        schema = waiting.get("schema")
        if schema:
            _validate_answer(value, schema)
        effect = next((e for e in _step_effects(store, run, waiting.get("step_no"))
                       if e.kind == r.INPUT and e.seq == waiting.get("seq")), None)
        if effect is None or effect.status != r.INTENT:
            raise InvalidTransitionError("answer", run.status, "the question was already answered")
        answered = _with(effect, status=r.DONE, result=value, finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "attention": None, "wake_at": None},
                        effects=[answered],
                        events=[events.input_received(answered),
                                events.status(r.QUEUED, reason="input received")],
                        take_over=True)
    return _act(store, run_id, "input", actor, "", decide)


def retry_now(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Wake a run waiting to retry a call: its next attempt starts at once."""
    def decide(run):
        effect = _retrying_effect(store, run, "retry now")
        woken = _with(effect, result={**effect.result, "wake_at": time.time()})
        return r.Commit(run={"status": r.QUEUED, "wake_at": None, "attention": None},
                        effects=[woken],
                        events=[events.status(r.QUEUED, reason="retry now", tool=effect.tool)],
                        take_over=True)
    return _act(store, run_id, "retry_now", actor, reason, decide)


def give_up(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Stop retrying a call: it fails, and the agent sees a ToolFailedError (not a
    permanent one: the item may well exist) and decides, as after a spent policy."""
    def decide(run):
        effect = _retrying_effect(store, run, "give up on")
        last = effect.error or {}
        error = {"type": "RetryGivenUp", "permanent": False,
                 "message": f"an operator gave up after {effect.attempts} attempt(s); the last "
                            f"error: {last.get('type', 'Error')}: {last.get('message', '')}"}
        failed = _with(effect, status=r.ERROR, error=error, result=None, finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "wake_at": None, "attention": None},
                        effects=[failed],
                        events=[events.resolved(failed, "give_up"),
                                events.status(r.QUEUED, reason="gave up retrying",
                                              tool=effect.tool)],
                        take_over=True)
    return _act(store, run_id, "give_up", actor, reason, decide)


def _retrying_effect(store, run, action: str) -> r.EffectRecord:
    waiting = run.attention or {}
    if run.status != r.WAITING or waiting.get("kind") != "retry":
        raise InvalidTransitionError(action, run.status, "the run is not waiting to retry a call")
    effect = next((e for e in _step_effects(store, run, waiting.get("step_no"))
                   if e.seq == waiting.get("seq") and e.status == r.RETRYING), None)
    if effect is None:  # the attention names a call the log does not hold as retrying
        raise InvalidTransitionError(action, run.status, "no call of the run waits to be retried")
    return effect


def rollback_preview(store, run_id: str, *, checkpoint: int) -> dict:
    """What a rollback to `checkpoint` undoes, for the operator to confirm: every call
    it supersedes (in log order) and, per tool, how many there are and how many of
    them were not idempotent and reached the outside world (done, or in doubt); and
    the child runs its undone spawns launched, which the rollback cancels or keeps."""
    run = store.get(run_id)
    history = store.history(run_id, r.HistoryQuery(forks=True, checkpoint=checkpoint))
    target = _checkpoint(run, history, checkpoint)
    supersede = _supersede(history, target, _next_branch(run, history))
    undone = [e for e in store.history(run_id, r.HistoryQuery(superseded_by=supersede)).effects
              if e.kind == r.CALL]
    children = [{"run_id": c.id, "agent": c.agent, "status": c.status,
                 "ended": c.status in r.FINAL_STATUSES}
                for c in undone_children(store, run, history, supersede)]
    by_tool: dict[str, dict] = {}
    for e in undone:
        tool = by_tool.setdefault(e.tool, {"tool": e.tool, "calls": 0, "not_idempotent": 0,
                                           "reached": 0})
        tool["calls"] += 1
        tool["not_idempotent"] += not e.idempotent
        tool["reached"] += not e.idempotent and e.status in REACHED
    return {"checkpoint": target.number, "step": target.step_no, "branch": target.branch,
            "steps_undone": max(0, run.step_no - target.step_no),
            "stays_paused": stays_paused(run), "by_tool": sorted(by_tool.values(),
                                                                 key=lambda t: -t["calls"]),
            "not_idempotent": sum(t["not_idempotent"] for t in by_tool.values()),
            "reached": sum(t["reached"] for t in by_tool.values()),
            "children": children,
            "effects": [{"step": e.step_no, "seq": e.seq, "branch": e.branch, "tool": e.tool,
                         "key": e.key, "status": e.status, "idempotent": e.idempotent,
                         "args_preview": e.args_preview} for e in undone]}


# --- budgets and gates' holds (docs/budgets.md, docs/approvals.md) --------------------------
BUDGET_UNITS = ("cost", "tokens")
MAX_BUDGET = {"cost": 1e9, "tokens": 1e15}


def check_budget(budget) -> dict | None:
    """A budget as stored: {"cost": dollars, "tokens": n}, either optional; {} or None
    is no budget. Anything else is an InputValidationError."""
    if budget is None:
        return None
    if not isinstance(budget, dict) or not budget.keys() <= set(BUDGET_UNITS):
        raise InputValidationError("a budget is {\"cost\": dollars, \"tokens\": n}", field="budget")
    checked = {}
    for unit, value in budget.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not (0 <= value <= MAX_BUDGET[unit]) or value != value:
            raise InputValidationError(f"the budget's {unit} must be a number from 0 to "
                                       f"{MAX_BUDGET[unit]:.0e}", field=f"budget.{unit}")
        checked[unit] = int(value) if unit == "tokens" else round(float(value), 6)
    return checked or None


def set_budget(store, run_id: str, *, budget, actor: str, reason: str = "") -> r.RunRecord:
    """Change a run's budget. A run held on it (budget reached) goes on where it stopped
    when the new budget is no longer reached; a run that is not held keeps its course."""
    from .gates import reached
    budget = check_budget(budget)

    def decide(run):
        if run.status in r.FINAL_STATUSES:
            raise InvalidTransitionError("change the budget of", run.status)
        details["before"] = run.budget
        attention = run.attention or {}
        held = (run.status == r.NEEDS_ATTENTION and attention.get("kind") == "budget"
                and attention.get("scope") == "run")
        if held and reached(run.usage, budget) is None:
            return r.Commit(run={"budget": budget, "status": r.QUEUED, "attention": None},
                            events=[events.budget(budget),
                                    events.status(r.QUEUED, reason="budget raised")],
                            take_over=True)
        return r.Commit(run={"budget": budget}, events=[events.budget(budget)])
    details = {"budget": budget}
    return _act(store, run_id, "budget", actor, reason, decide, details=details)


def lift_hold(store, run_id: str, *, kind: str, actor: str, reason: str = "",
              match: dict | None = None, action: str = "lift_hold",
              details: dict | None = None) -> r.RunRecord | None:
    """Queue a run held by a gate (attention of `kind` whose fields include `match`), so
    that its gates are asked again: after an approval's answer, or a quota raised. None
    (nothing written) when the run is not held so: it will ask when it gets there."""
    def decide(run):
        attention = run.attention or {}
        if run.status not in (r.WAITING, r.NEEDS_ATTENTION) or attention.get("kind") != kind \
                or any(attention.get(k) != v for k, v in (match or {}).items()):
            raise _NotHeld()
        return r.Commit(run={"status": r.QUEUED, "attention": None, "wake_at": None},
                        events=[events.status(r.QUEUED, reason=f"{kind}: {action}")],
                        take_over=True)
    try:
        return _act(store, run_id, action, actor, reason, decide, details=details)
    except _NotHeld:
        return None


class _NotHeld(Exception):
    pass


# --- internals --------------------------------------------------------------------------
def _act(store, run_id, action, actor, reason, decide, details=None) -> r.RunRecord:
    for _ in range(ATTEMPTS):
        run = store.get(run_id)
        commit = decide(run)
        after = {**_summary(run), **{k: v for k, v in commit.run.items()
                                     if k in ("status", "branch", "step_no", "control",
                                              "agent_version")}}
        commit.audit = r.AuditRecord(actor=actor, action=action, reason=reason,
                                     before=_summary(run), after={**after, **(details or {})})
        commit.events.append(events.audit(action, actor, reason, **(details or {})))
        commit.expect_status = run.status
        if commit.take_over:
            # The old owner is fenced off by the new epoch; its lease means nothing now.
            commit.release = True
        try:
            result = store.commit(run_id, run.epoch, commit)
        except FencedError:
            continue  # a worker claimed or released it meanwhile: decide again on fresh state
        observe.current().acted(action, result.run)
        return result.run
    raise FencedError(run_id, -1)


def _summary(run: r.RunRecord) -> dict:
    return {"status": run.status, "branch": run.branch, "step_no": run.step_no,
            "control": run.control, "agent_version": run.agent_version}


def _fork(run, history, target: r.CheckpointRecord, state, *, status, reason, extra=None):
    """`history` holds the forks (HistoryQuery.forks): the lineage of every branch."""
    blob, codec = encode_state(state)
    branch = _next_branch(run, history)
    checkpoint = r.CheckpointRecord(number=0, branch=branch, step_no=target.step_no, blob=blob,
                                    codec=codec, reason=reason, parent_number=target.number,
                                    created_at=time.time())
    update = {"status": status, "branch": branch, "step_no": target.step_no, "control": None,
              "error": None, "attention": None, "output": None, "wake_at": None,
              "crash_count": 0, "suspended_at": time.time(), **(extra or {})}
    return r.Commit(run=update, checkpoint=checkpoint,
                    supersede=_supersede(history, target, branch),
                    events=[events.forked(reason, target, branch),
                            events.status(status, reason=reason)],
                    take_over=True)


def _forks(store, run_id: str) -> r.History:
    return store.history(run_id, r.HistoryQuery(forks=True))


def _next_branch(run, history) -> int:
    return max([run.branch] + [c.branch for c in history.checkpoints]) + 1


def _supersede(history, target: r.CheckpointRecord, branch: int) -> r.Supersede:
    """What forking `branch` from `target` marks dead: every effect after the target's
    step, and every effect off the target's lineage."""
    return r.Supersede(after_step=target.step_no,
                       keep_branches=tuple(_lineage(history, target.branch)) + (branch,))


def _step_effects(store, run, step_no) -> list[r.EffectRecord]:
    """The live effects of the run's step `step_no` on its branch."""
    if not isinstance(step_no, int):
        return []
    return store.history(run.id, r.HistoryQuery(step=(run.branch, step_no))).effects


def _lineage(history: r.History, branch: int) -> list[int]:
    """The branch and the branches it was forked from."""
    by_number = {c.number: c for c in history.checkpoints}
    lineage = [branch]
    while True:
        first = min((c for c in history.checkpoints if c.branch == lineage[-1]),
                    key=lambda c: c.number, default=None)
        parent = by_number.get(first.parent_number) if first and first.parent_number else None
        if parent is None or parent.branch in lineage:
            return lineage
        lineage.append(parent.branch)


def _checkpoint(run, history, number: int) -> r.CheckpointRecord:
    found = next((c for c in history.checkpoints if c.number == number), None)
    if found is None:
        raise CheckpointNotFoundError(run.id, number)
    return found


def _with(effect: r.EffectRecord, **changes) -> r.EffectRecord:
    import dataclasses
    return dataclasses.replace(effect, **changes)


def _validate_answer(value, schema: dict) -> None:
    import jsonschema
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise InputValidationError(exc.message, field=".".join(map(str, exc.absolute_path))) from None
    except jsonschema.SchemaError as exc:
        raise InputValidationError(f"the prompt's schema is invalid: {exc.message}") from None
