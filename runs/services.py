"""Writes, as `run_<action>` functions: thin wrappers over the engine's control
functions that bind the ORM store and the acting user. A run made due (launched,
resumed...) needs nothing more: a free worker slot finds it at its next poll of the
due runs (runs/worker/execute.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from runs.durable import control
from runs.durable import records as r
from runs.durable import upgrade as durable_upgrade
from runs.models import Run
from runs.storage import database_store
from runs.storage.orm import OrmStore, run_row
from runs.wakeups import notify_run


def store() -> OrmStore:
    return database_store(notify=notify_run)


def _actor(user) -> str:
    if user is None:
        return "system"
    if isinstance(user, str):
        return user
    return user.get_username()


def _after(record: r.RunRecord) -> Run:
    return run_row(record)  # as committed: reading it back costs a query for nothing


def run_launch(*, user: AbstractBaseUser | None, agent: str, inputs,
               run_id: str | None = None, budget=None) -> Run:
    """`run_id`: chosen by the caller (an API launch under an Idempotency-Key)."""
    # No transaction around it: the store writes the run and its first event in one
    # (one statement on PostgreSQL), and that is the whole launch.
    record = control.launch(store(), agent=agent, inputs=inputs,
                            owner=str(user.pk) if user is not None else "", run_id=run_id,
                            max_input_bytes=settings.AGENTOPS["MAX_INPUT_BYTES"],
                            budget=budget)
    # as the store wrote it, not read back (a worker may already hold it by now anyway):
    # a quarter of a launch's time went to reading it
    return run_row(record)


def run_pause(*, run_id: str, user, reason: str = "") -> Run:
    return _after(control.pause(store(), run_id, actor=_actor(user), reason=reason))


def run_resume(*, run_id: str, user, reason: str = "", upgrade: bool = False) -> Run:
    """`upgrade`: continue on the agent's current code (runs/durable/upgrade.py)."""
    if upgrade:
        return _after(durable_upgrade.upgrade(store(), run_id, actor=_actor(user),
                                              reason=reason))
    return _after(control.resume(store(), run_id, actor=_actor(user), reason=reason))


def run_cancel(*, run_id: str, user, reason: str = "") -> Run:
    return _after(control.cancel(store(), run_id, actor=_actor(user), reason=reason))


def run_retry_now(*, run_id: str, user, reason: str = "") -> Run:
    return _after(control.retry_now(store(), run_id, actor=_actor(user), reason=reason))


def run_give_up(*, run_id: str, user, reason: str = "") -> Run:
    return _after(control.give_up(store(), run_id, actor=_actor(user), reason=reason))


def run_rollback(*, run_id: str, checkpoint: int, user, reason: str = "",
                 resume: bool | None = None, children: str = "cancel") -> Run:
    """`resume`: the new branch runs, or waits paused; None: a paused run stays paused.
    `children`: "cancel" or "keep" the child runs its undone spawns launched."""
    return _after(control.rollback(store(), run_id, checkpoint=checkpoint, actor=_actor(user),
                                   reason=reason, resume=resume, children=children))


def run_resolve_effect(*, run_id: str, seq: int, resolution: str, user, reason: str = "",
                       result=None) -> Run:
    return _after(control.resolve_effect(store(), run_id, seq=seq, resolution=resolution,
                                         result=result, actor=_actor(user), reason=reason))


def run_edit_state(*, run_id: str, state, user, reason: str = "") -> Run:
    return _after(control.edit_state(store(), run_id, state=state, actor=_actor(user),
                                     reason=reason))


def run_patch_state(*, run_id: str, patch: list, user, reason: str = "",
                    checkpoint: int | None = None) -> Run:
    """Edit the state by a JSON Patch on `checkpoint` (the one the operator looked at)."""
    return _after(control.patch_state(store(), run_id, patch=patch, actor=_actor(user),
                                      reason=reason, checkpoint=checkpoint))


def run_provide_input(*, run_id: str, value, user) -> Run:
    return _after(control.provide_input(store(), run_id, value=value, actor=_actor(user)))


def run_rollback_preview(*, run_id: str, checkpoint: int) -> dict:
    return control.rollback_preview(store(), run_id, checkpoint=checkpoint)
