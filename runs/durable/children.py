"""Sub-agents: ctx.spawn, ctx.wait and ctx.wait_all (docs/children.md).

A spawn is an effect of the parent at its position: logged once the child is
launched, replayed (the same child handle) ever after. Its idempotency key is the
child's `spawn_key`, unique among runs, so a step cut short between the launch and
the log finds the child it launched instead of launching another.

A wait is an effect too, logged once every child it names is final, with their
outcomes in the order asked: a replay returns the same outcomes. Until then the
parent gives its worker up (`waiting`, no lease, no slot) and is woken by the store
when one of the children it waits on ends (runs/durable/family.py). A spawn beyond
the cap of running children waits the same way for one to end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import control, events, family
from . import records as r
from .errors import ChildFailedError, DurableError
from .faults import faults

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext

DEFAULT_MAX_CHILDREN = 10


@dataclass(frozen=True)
class Child:
    """A handle on a child run, what ctx.spawn returns and ctx.wait takes. Plain data:
    it may be kept in the parent's state as `handle.as_state()`."""

    run_id: str
    agent: str

    def as_state(self) -> dict:
        return {"run_id": self.run_id, "agent": self.agent}

    @classmethod
    def of(cls, value) -> Child:
        if isinstance(value, Child):
            return value
        if isinstance(value, dict) and isinstance(value.get("run_id"), str):
            return cls(value["run_id"], str(value.get("agent", "")))
        raise TypeError(f"ctx.wait needs handles from ctx.spawn, got {value!r}")


def spawn(ctx: RunContext, agent: str, inputs: dict | None, *, max_children: int) -> Child:
    from .context import Suspend  # the context module imports this one

    if not isinstance(max_children, int) or isinstance(max_children, bool) or max_children < 1:
        raise ValueError(f"max_children must be a positive integer, not {max_children!r}")
    inputs = dict(inputs or {})
    position, recorded = ctx._next(r.SPAWN, r.SPAWN, (agent, inputs), {})
    if recorded is not None:
        return Child.of(recorded.result)
    session = ctx._session
    session.effect_boundary()
    record = ctx._new_record(position, r.SPAWN, None, (agent, inputs), {})
    # Only the children still running are read (at most the cap), not all of them: the
    # one this spawn launched before a crash is among them, or has ended, and then the
    # launch below returns it (its key is taken).
    running = _store(session.store.children, ctx.run_id, active_only=True)
    child = next((c for c in running if c.spawn_key == record.key), None)
    if child is None:
        active = [c.id for c in running]
        if len(active) >= max_children:
            raise Suspend(wake_at=time.time() + family.RECHECK_SECONDS,
                          reason=_waiting("slot", active, position, max_children=max_children),
                          records=[], events=[])
        session.ensure_lease()
        run = session.run
        child = _store(control.launch, session.store, agent=agent, inputs=inputs,
                       owner=run.owner, registry=session.registry, parent_id=run.id,
                       spawn_key=record.key)
        faults.hit("after_spawn_before_log", run.agent)
        if session.config.launched is not None:
            session.config.launched(child.id)
    record.args = {"agent": agent}
    record.started_at = record.finished_at = time.time()
    record.status, record.result = r.DONE, {"run_id": child.id, "agent": agent}
    session.emit(events.spawned(child.id, agent, record.key))
    session.log_effect(record)
    return Child(child.id, agent)


def wait_all(ctx: RunContext, handles, *, return_exceptions: bool = False) -> list:
    from .context import Suspend

    wanted = [Child.of(h) for h in handles]
    ids = [c.run_id for c in wanted]
    position, recorded = ctx._next(r.JOIN, r.JOIN, (ids,), {})
    if recorded is None:
        session = ctx._session
        runs = {c.id: c for c in _store(session.store.children, ctx.run_id)}
        strangers = [i for i in ids if i not in runs]
        if strangers:
            raise ValueError(f"not children of this run: {', '.join(strangers)}")
        pending = [i for i in ids if runs[i].status not in r.FINAL_STATUSES]
        if pending:
            session.effect_boundary()  # a pending pause or cancel stops here, not later
            faults.hit("before_children_wait", session.run.agent)
            raise Suspend(wake_at=time.time() + family.RECHECK_SECONDS,
                          reason=_waiting("all", pending, position), records=[], events=[])
        record = ctx._new_record(position, r.JOIN, None, (ids,), {})
        record.started_at = record.finished_at = time.time()
        record.status, record.result = r.DONE, [outcome(runs[i]) for i in ids]
        session.log_effect(record)
        recorded = record
    results = []
    for done in recorded.result:
        if done["status"] == r.SUCCEEDED:
            results.append(done["output"])
            continue
        error = ChildFailedError(done["run_id"], done["agent"], done["status"], done["error"])
        if not return_exceptions:
            raise error
        results.append(error)
    return results


def _store(fn, *args, **kwargs):
    """A read or a launch through the store, from inside a step: the store's own failure
    (a lost connection) is not the agent's, so it ends the session as any store failure
    does (StoreFailure) instead of failing the run; the engine's errors (an unknown
    agent, invalid inputs) are the agent's and reach its step."""
    from .context import StoreFailure

    try:
        return fn(*args, **kwargs)
    except DurableError:
        raise
    except Exception as exc:
        raise StoreFailure() from exc


def outcome(run: r.RunRecord) -> dict[str, Any]:
    """What a wait logs of a final child: enough to return or raise it on every replay."""
    error = None
    if run.status == r.FAILED:
        error = f"{(run.error or {}).get('type', 'Error')}: {(run.error or {}).get('message', '')}"
    elif run.status == r.CANCELLED:
        error = "cancelled"
    return {"run_id": run.id, "agent": run.agent, "status": run.status,
            "output": run.output if run.status == r.SUCCEEDED else None, "error": error}


def _waiting(what: str, pending: list[str], position, **details) -> dict:
    return {"kind": family.WAITING_FOR, "waiting_for": what, "pending": pending,
            "step_no": position[1], "seq": position[2], **details}
