"""Launch and operator actions, on any Store.

Each action reads the run, decides, and commits conditionally on the epoch it
read; if a worker claimed the run in between (FencedError), it reads again.
Actions that rewrite a run's course (rollback, resolve, edit, upgrade, and
stopping a run that no worker holds) take the run over: the epoch moves on,
so a worker still holding the old epoch can write nothing more.
"""

from __future__ import annotations

import time
import uuid

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

ATTEMPTS = 5
RESOLUTIONS = ("done", "retry", "skip")
MAX_INPUT_BYTES = 256 * 1024


def launch(store, *, agent: str, inputs, owner: str = "", run_id: str | None = None,
           registry: AgentRegistry = default_registry,
           max_input_bytes: int = MAX_INPUT_BYTES) -> r.RunRecord:
    agent_cls = type(registry.get(agent))
    validated = validate_inputs(agent_cls, inputs)
    check_serializable(validated, "inputs")
    size = len(dumps(validated).encode())
    if size > max_input_bytes:
        raise InputValidationError(f"inputs are too large: {size} bytes, over the limit of "
                                   f"{max_input_bytes} bytes")
    run = r.RunRecord(id=run_id or uuid.uuid4().hex, agent=agent,
                      agent_version=str(agent_cls.version), inputs=validated, owner=owner)
    return store.create_run(run)


def pause(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    def decide(run, history):
        if run.status == r.RUNNING:
            return r.Commit(run={"control": r.PAUSE}, events=[("control", {"action": "pause"})])
        if run.status in (r.QUEUED, r.WAITING):
            return r.Commit(run={"status": r.PAUSED, "control": None, "suspended_at": time.time()},
                            events=[("status", {"status": r.PAUSED, "reason": "paused"})],
                            take_over=True)
        raise InvalidTransitionError("pause", run.status)
    return _act(store, run_id, "pause", actor, reason, decide)


def resume(store, run_id: str, *, actor: str, reason: str = "", upgrade: bool = False,
           registry: AgentRegistry = default_registry) -> r.RunRecord:
    """Resume a paused run, retry a failed one from its last checkpoint, or continue one
    that needs attention. `upgrade` continues on the agent's current version from the
    last checkpoint on a new branch (after "code changed" or a non-determinism error)."""

    def decide(run, history):
        if upgrade:
            if run.status in r.FINAL_STATUSES and run.status != r.FAILED:
                raise InvalidTransitionError("upgrade", run.status)
            version = str(type(registry.get(run.agent)).version)
            if not any(c.branch == run.branch for c in history.checkpoints):
                # It never started: no code of the old version ran, so start afresh.
                return r.Commit(run={"status": r.QUEUED, "agent_version": version,
                                     "control": None, "attention": None, "error": None,
                                     "crash_count": 0},
                                events=[("status", {"status": r.QUEUED, "reason": "upgrade"})],
                                take_over=True)
            latest = _latest_checkpoint(run, history)
            return _fork(run, history, latest, checkpoint_state(latest, history.checkpoints),
                         status=r.QUEUED, reason="upgrade", extra={"agent_version": version})
        attention = (run.attention or {}).get("kind")
        queued = {"status": r.QUEUED, "control": None, "attention": None, "error": None,
                  "crash_count": 0}
        event = ("status", {"status": r.QUEUED, "reason": "resumed"})
        if run.status == r.PAUSED:
            return r.Commit(run=queued, events=[event], take_over=True)
        if run.status == r.RUNNING and run.control == r.PAUSE:
            return r.Commit(run={"control": None}, events=[("control", {"action": "resume"})])
        if run.status == r.FAILED:
            retried = [_with(e, resolution="retry") for e in _live_after(run, history)
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
    def decide(run, history):
        if run.status == r.RUNNING:
            return r.Commit(run={"control": r.CANCEL}, events=[("control", {"action": "cancel"})])
        if run.status in r.FINAL_STATUSES:
            raise InvalidTransitionError("cancel", run.status)
        return r.Commit(run={"status": r.CANCELLED, "control": None, "wake_at": None},
                        events=[("status", {"status": r.CANCELLED, "reason": "cancelled"})],
                        take_over=True)
    return _act(store, run_id, "cancel", actor, reason, decide)


def rollback(store, run_id: str, *, checkpoint: int, actor: str, reason: str = "") -> r.RunRecord:
    def decide(run, history):
        target = _checkpoint(run, history, checkpoint)
        return _fork(run, history, target, checkpoint_state(target, history.checkpoints),
                     status=r.QUEUED, reason="rollback")
    return _act(store, run_id, "rollback", actor, reason, decide, details={"checkpoint": checkpoint})


def edit_state(store, run_id: str, *, state, actor: str, reason: str = "") -> r.RunRecord:
    """Replace the working state: a new checkpoint on a new branch; the run is left paused."""
    if not isinstance(state, dict):
        raise InputValidationError("the state must be a JSON object")
    check_serializable(state)

    def decide(run, history):
        if run.status == r.RUNNING and run.lease_owner:
            raise InvalidTransitionError("edit the state of", run.status, "pause it first")
        return _fork(run, history, _latest_checkpoint(run, history), state,
                     status=r.PAUSED, reason="edit")
    return _act(store, run_id, "edit_state", actor, reason, decide)


def resolve_effect(store, run_id: str, *, seq: int, resolution: str, actor: str, reason: str = "",
                   result=None) -> r.RunRecord:
    """The operator's answer to an in-doubt effect: it happened (with `result`), retry it
    with the same idempotency key, or skip it (the call returns `result`, default None)."""
    if resolution not in RESOLUTIONS:
        raise InputValidationError(f"resolution must be one of {', '.join(RESOLUTIONS)}",
                                   field="resolution")
    check_serializable(result, "result")

    def decide(run, history):
        attention = run.attention or {}
        if run.status != r.NEEDS_ATTENTION or attention.get("kind") != "in_doubt":
            raise InvalidTransitionError("resolve an effect of", run.status,
                                         "only a run with an in-doubt effect can be resolved")
        step_no = attention.get("step_no")
        effect = next((e for e in history.effects if e.branch == run.branch and
                       e.step_no == step_no and e.seq == seq and not e.superseded
                       and e.status == r.INTENT), None)
        if effect is None:
            raise EffectNotFoundError(run_id, f"at step {step_no}, seq {seq}")
        if resolution == "retry":
            resolved = _with(effect, resolution="retry")
        else:
            resolved = _with(effect, status=r.DONE, result=result, resolution=resolution,
                             finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "attention": None, "crash_count": 0},
                        effects=[resolved],
                        events=[("effect", {"step": effect.step_no, "seq": seq, "tool": effect.tool,
                                            "key": effect.key, "status": resolved.status,
                                            "resolution": resolution}),
                                ("status", {"status": r.QUEUED, "reason": f"resolved: {resolution}"})],
                        take_over=True)
    return _act(store, run_id, "resolve", actor, reason, decide,
                details={"seq": seq, "resolution": resolution, "result": result})


def provide_input(store, run_id: str, *, value, actor: str) -> r.RunRecord:
    """A user's answer to wait_for_input, validated against the prompt's schema."""
    check_serializable(value, "input")

    def decide(run, history):
        waiting = run.attention or {}
        if run.status != r.WAITING or waiting.get("kind") != "input":
            raise InvalidTransitionError("answer", run.status, "the run is not waiting for input")
        schema = waiting.get("schema")
        if schema:
            _validate_answer(value, schema)
        effect = next((e for e in history.effects if e.branch == run.branch and e.kind == r.INPUT
                       and e.step_no == waiting.get("step_no") and e.seq == waiting.get("seq")
                       and not e.superseded), None)
        if effect is None or effect.status != r.INTENT:
            raise InvalidTransitionError("answer", run.status, "the question was already answered")
        answered = _with(effect, status=r.DONE, result=value, finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "attention": None, "wake_at": None},
                        effects=[answered],
                        events=[("input_received", {"seq": effect.seq, "step": effect.step_no,
                                                    "value": value}),
                                ("status", {"status": r.QUEUED, "reason": "input received"})],
                        take_over=True)
    return _act(store, run_id, "input", actor, "", decide)


def retry_now(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Wake a run waiting to retry a call: its next attempt starts at once."""
    def decide(run, history):
        effect = _retrying_effect(run, history, "retry now")
        woken = _with(effect, result={**effect.result, "wake_at": time.time()})
        return r.Commit(run={"status": r.QUEUED, "wake_at": None, "attention": None},
                        effects=[woken],
                        events=[("status", {"status": r.QUEUED, "reason": "retry now",
                                            "tool": effect.tool})],
                        take_over=True)
    return _act(store, run_id, "retry_now", actor, reason, decide)


def give_up(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Stop retrying a call: it fails, and the agent sees a ToolFailedError (not a
    permanent one: the item may well exist) and decides, as after a spent policy."""
    def decide(run, history):
        effect = _retrying_effect(run, history, "give up on")
        last = effect.error or {}
        error = {"type": "RetryGivenUp", "permanent": False,
                 "message": f"an operator gave up after {effect.attempts} attempt(s); the last "
                            f"error: {last.get('type', 'Error')}: {last.get('message', '')}"}
        failed = _with(effect, status=r.ERROR, error=error, result=None, finished_at=time.time())
        return r.Commit(run={"status": r.QUEUED, "wake_at": None, "attention": None},
                        effects=[failed],
                        events=[("effect", {"step": effect.step_no, "seq": effect.seq,
                                            "tool": effect.tool, "key": effect.key,
                                            "status": r.ERROR, "resolution": "give_up"}),
                                ("status", {"status": r.QUEUED, "reason": "gave up retrying",
                                            "tool": effect.tool})],
                        take_over=True)
    return _act(store, run_id, "give_up", actor, reason, decide)


def _retrying_effect(run, history, action: str) -> r.EffectRecord:
    waiting = run.attention or {}
    if run.status != r.WAITING or waiting.get("kind") != "retry":
        raise InvalidTransitionError(action, run.status, "the run is not waiting to retry a call")
    effect = next((e for e in history.effects if e.branch == run.branch and not e.superseded
                   and e.step_no == waiting.get("step_no") and e.seq == waiting.get("seq")
                   and e.status == r.RETRYING), None)
    if effect is None:  # the attention names a call the log does not hold as retrying
        raise InvalidTransitionError(action, run.status, "no call of the run waits to be retried")
    return effect


def rollback_preview(store, run_id: str, *, checkpoint: int) -> dict:
    """What a rollback to `checkpoint` undoes, for the operator to confirm."""
    run = store.load(run_id).run
    history = store.history(run_id)
    target = _checkpoint(run, history, checkpoint)
    undone = [e for e in history.effects if not e.superseded and e.kind == r.CALL
              and _after(e, target.step_no, _lineage(history, target.branch))]
    as_dict = [{"step": e.step_no, "seq": e.seq, "branch": e.branch, "tool": e.tool,
                "key": e.key, "status": e.status, "idempotent": e.idempotent,
                "args_preview": e.args_preview} for e in undone]
    return {"checkpoint": target.number, "step": target.step_no, "branch": target.branch,
            "effects": as_dict,
            "idempotent": [e for e in as_dict if e["idempotent"]],
            "not_idempotent": [e for e in as_dict if not e["idempotent"]],
            "steps_undone": max(0, run.step_no - target.step_no)}


# --- internals --------------------------------------------------------------------------
def _act(store, run_id, action, actor, reason, decide, details=None) -> r.RunRecord:
    for _ in range(ATTEMPTS):
        run = store.load(run_id).run
        history = store.history(run_id)
        commit = decide(run, history)
        after = {**_summary(run), **{k: v for k, v in commit.run.items()
                                     if k in ("status", "branch", "step_no", "control",
                                              "agent_version")}}
        commit.audit = r.AuditRecord(actor=actor, action=action, reason=reason,
                                     before=_summary(run), after={**after, **(details or {})})
        commit.events.append(("audit", {"action": action, "actor": actor, "reason": reason,
                                        **(details or {})}))
        commit.expect_status = run.status
        if commit.take_over:
            # The old owner is fenced off by the new epoch; its lease means nothing now.
            commit.release = True
        try:
            store.commit(run_id, run.epoch, commit)
        except FencedError:
            continue  # a worker claimed or released it meanwhile: decide again on fresh state
        return store.load(run_id).run
    raise FencedError(run_id, -1)


def _summary(run: r.RunRecord) -> dict:
    return {"status": run.status, "branch": run.branch, "step_no": run.step_no,
            "control": run.control, "agent_version": run.agent_version}


def _fork(run, history, target: r.CheckpointRecord, state, *, status, reason, extra=None):
    blob, codec = encode_state(state)
    branch = max([run.branch] + [c.branch for c in history.checkpoints]) + 1
    checkpoint = r.CheckpointRecord(number=0, branch=branch, step_no=target.step_no, blob=blob,
                                    codec=codec, reason=reason, parent_number=target.number,
                                    created_at=time.time())
    keep = tuple(_lineage(history, target.branch)) + (branch,)
    update = {"status": status, "branch": branch, "step_no": target.step_no, "control": None,
              "error": None, "attention": None, "output": None, "wake_at": None,
              "crash_count": 0, "suspended_at": time.time(), **(extra or {})}
    return r.Commit(run=update, checkpoint=checkpoint,
                    supersede=r.Supersede(after_step=target.step_no, keep_branches=keep),
                    events=[(reason, {"from_checkpoint": target.number, "branch": branch,
                                      "step": target.step_no}),
                            ("status", {"status": status, "reason": reason})],
                    take_over=True)


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


def _after(effect: r.EffectRecord, step_no: int, lineage: list[int]) -> bool:
    return effect.step_no > step_no or effect.branch not in lineage


def _checkpoint(run, history, number: int) -> r.CheckpointRecord:
    found = next((c for c in history.checkpoints if c.number == number), None)
    if found is None:
        raise CheckpointNotFoundError(run.id, number)
    return found


def _latest_checkpoint(run, history) -> r.CheckpointRecord:
    live = [c for c in history.checkpoints if c.branch == run.branch]
    if not live:
        raise InvalidTransitionError("fork", run.status, "the run has no checkpoint yet")
    return max(live, key=lambda c: (c.step_no, c.number))


def _live_after(run, history):
    latest = max((c.step_no for c in history.checkpoints if c.branch == run.branch), default=0)
    return [e for e in history.effects if e.branch == run.branch and e.step_no > latest
            and not e.superseded]


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
