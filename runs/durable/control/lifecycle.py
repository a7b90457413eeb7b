"""A run launched, paused, resumed and cancelled (with its children)."""

from __future__ import annotations

import uuid

from .. import clock, events, observe, versions
from .. import records as r
from ..errors import InputValidationError, InvalidTransitionError
from ..registry import AgentRegistry, validate_inputs
from ..registry import registry as default_registry
from ..serde import check_serializable, dumps
from .act import act
from .holds import check_budget

MAX_INPUT_BYTES = 256 * 1024


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
                      budget=budget, parent_id=parent_id, spawn_key=spawn_key,
                      code_fingerprint=versions.fingerprint(agent_cls))
    created = store.create_run(run)
    observe.current().launched(created)
    return created


def pause(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    def decide(run):
        if run.status == r.RUNNING:
            return r.OperatorCommit(run=r.RunChanges(control=r.PAUSE),
                                    events=[events.control("pause")])
        if run.status in (r.QUEUED, r.WAITING):
            return r.OperatorCommit(
                run=r.RunChanges(status=r.PAUSED, control=None, suspended_at=clock.now()),
                events=[events.status(r.PAUSED, reason="paused")], take_over=True)
        raise InvalidTransitionError("pause", run.status)
    return act(store, run_id, "pause", actor, reason, decide)


def resume(store, run_id: str, *, actor: str, reason: str = "") -> r.RunRecord:
    """Resume a paused run, retry a failed one from its last checkpoint, or continue one
    that needs attention. (Continuing on new code is an upgrade: runs/durable/upgrade.py.)"""

    def decide(run):
        queued = r.RunChanges(status=r.QUEUED, control=None, attention=None, error=None,
                              crash_count=0)
        event = events.status(r.QUEUED, reason="resumed")
        if run.status == r.PAUSED:
            return r.OperatorCommit(run=queued, events=[event], take_over=True)
        if run.status == r.RUNNING and run.control == r.PAUSE:
            return r.OperatorCommit(run=r.RunChanges(control=None),
                                    events=[events.control("resume")])
        if run.status == r.FAILED:
            retried = [e for e in store.load(run_id).effects if e.status == r.ERROR]
            for effect in retried:
                effect.ask_retry()
            return r.OperatorCommit(run=queued, effects=retried, events=[event],
                                    take_over=True)
        if run.status == r.NEEDS_ATTENTION:
            if (run.attention or {}).get("kind") == "in_doubt":
                raise InvalidTransitionError("resume", run.status, "resolve the in-doubt effect "
                                             "first (done / retry / skip) or roll back")
            return r.OperatorCommit(run=queued, events=[event], take_over=True)
        raise InvalidTransitionError("resume", run.status)
    return act(store, run_id, "resume", actor, reason, decide)


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
            return r.OperatorCommit(run=r.RunChanges(control=r.CANCEL),
                                    events=[events.control("cancel")])
        if run.status in r.FINAL_STATUSES:
            raise InvalidTransitionError("cancel", run.status)
        # What it waited for (a retry, an answer) or needed is over: no attention left.
        return r.OperatorCommit(
            run=r.RunChanges(status=r.CANCELLED, control=None, wake_at=None, attention=None),
            events=[events.status(r.CANCELLED, reason="cancelled")], take_over=True)
    return act(store, run_id, "cancel", actor, reason, decide)
